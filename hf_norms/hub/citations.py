"""The paper behind each norm_type, as model cards cite it (title, authors, venue, arXiv id, BibTeX)."""

from __future__ import annotations

from dataclasses import dataclass


@dataclass(frozen=True)
class Paper:
    """One paper; `authors` as "First Last" in the paper's order."""

    key: str
    title: str
    authors: tuple[str, ...]
    booktitle: str
    year: int
    arxiv_id: str
    pages: str | None = None

    @property
    def short_citation(self) -> str:
        """E.g. `Zhu et al., Transformers without Normalization, CVPR 2025 (arXiv 2503.10622)`."""
        return f"{self.authors[0].split()[-1]} et al., {self.title}, {self.venue} (arXiv {self.arxiv_id})"

    @property
    def venue(self) -> str:
        return f"{self.booktitle.split('(')[-1].rstrip(')')} {self.year}" if "(" in self.booktitle else self.booktitle

    @property
    def url(self) -> str:
        return f"https://arxiv.org/abs/{self.arxiv_id}"

    def bibtex(self) -> str:
        """A BibTeX `@inproceedings` entry with the arXiv id as `eprint`."""
        authors = " and ".join(_bibtex_name(name) for name in self.authors)
        fields = [
            ("title", self.title),
            ("author", authors),
            ("booktitle", self.booktitle),
            ("year", str(self.year)),
            *([("pages", self.pages)] if self.pages else []),
            ("eprint", self.arxiv_id),
            ("archivePrefix", "arXiv"),
        ]
        body = ",\n".join(f"  {name} = {{{value}}}" for name, value in fields)
        return f"@inproceedings{{{self.key},\n{body}\n}}"


def _bibtex_name(name: str) -> str:
    """ "Jiachen Zhu" -> "Zhu, Jiachen"."""
    *given, family = name.split()
    return f"{family}, {' '.join(given)}"


PAPERS: dict[str, Paper] = {
    "dyt": Paper(
        key="zhu2025dyt",
        title="Transformers without Normalization",
        authors=("Jiachen Zhu", "Xinlei Chen", "Kaiming He", "Yann LeCun", "Zhuang Liu"),
        booktitle="Proceedings of the IEEE/CVF Conference on Computer Vision and Pattern Recognition (CVPR)",
        year=2025,
        arxiv_id="2503.10622",
    ),
    "derf": Paper(
        key="chen2026derf",
        title="Stronger Normalization-Free Transformers",
        authors=("Mingzhi Chen", "Taiming Lu", "Jiachen Zhu", "Mingjie Sun", "Zhuang Liu"),
        booktitle="Proceedings of the IEEE/CVF Conference on Computer Vision and Pattern Recognition (CVPR)",
        year=2026,
        arxiv_id="2512.10938",
    ),
    "dtn": Paper(
        key="shao2022dtn",
        title="Dynamic Token Normalization Improves Vision Transformers",
        authors=("Wenqi Shao", "Yixiao Ge", "Zhaoyang Zhang", "Xuyuan Xu", "Xiaogang Wang", "Ying Shan", "Ping Luo"),
        booktitle="International Conference on Learning Representations (ICLR)",
        year=2022,
        arxiv_id="2112.02624",
    ),
    "sepnorm": Paper(
        key="chen2023sepnorm",
        title="On Separate Normalization in Self-supervised Transformers",
        authors=("Xiaohui Chen", "Yinkai Wang", "Yuanqi Du", "Soha Hassoun", "Li-Ping Liu"),
        booktitle="Advances in Neural Information Processing Systems (NeurIPS)",
        year=2023,
        arxiv_id="2309.12931",
    ),
    "lape": Paper(
        key="yu2023lape",
        title=("LaPE: Layer-adaptive Position Embedding for Vision Transformers with Independent Layer Normalization"),
        authors=(
            "Runyi Yu",
            "Zhennan Wang",
            "Yinhuai Wang",
            "Kehan Li",
            "Chang Liu",
            "Haoyi Duan",
            "Xiangyang Ji",
            "Jie Chen",
        ),
        booktitle="Proceedings of the IEEE/CVF International Conference on Computer Vision (ICCV)",
        year=2023,
        arxiv_id="2212.05262",
        pages="5886--5896",
    ),
}
