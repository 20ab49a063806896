"""Speed, memory and fidelity measurements of hf-norms; each module runs with `python -m benchmarks.<name>`."""
