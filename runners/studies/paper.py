"""The paper's reference numbers (Section 4, Tables 1, 3, 4; Appendix B), shown beside ours."""

from __future__ import annotations

# Table 1 and Appendix B: peak D_shift^50 per track (mean, 95% CI, sigma_embed, seeds).
PAPER_MAIN = {
    "A": {"mean": 0.8089, "ci": (0.8000, 0.8159), "sigma": 0.5321,
          "seeds": (0.8000, 0.8159, 0.8108)},
    "B": {"mean": 0.8238, "ci": (0.8217, 0.8249), "sigma": 0.5324, "seeds": None},
    "C": {"mean": 0.7848, "std": 0.0078, "ci": (0.7776, 0.7931), "sigma": 0.4123,
          "seeds": (0.7776, 0.7931, 0.7838)},
}
PAPER_DELTA = 0.0474  # the pre-registered (D_B - D_C) / D_B
PAPER_OUTCOME = "C"
PAPER_SECONDARY_DELTA = 0.0298  # (D_A - D_C) / D_A, not pre-registered
PAPER_ABLATION = {  # Table 3: (peak, final, settling)
    "baseline": (0.7776, 0.8349, 0.0573),
    "freeze-8000-rep1": (0.7994, 0.8051, 0.0057),
    "freeze-8000-rep2": (0.7882, 0.8097, 0.0215),
    "freeze-10000": (0.7996, 0.8205, 0.0209),
}
PAPER_LAMBDA = {  # Table 4: (peak, final, sigma at peak), keyed by lambda_key
    "0.05": (0.7776, 0.8349, 0.4123),
    "0.10": (0.8139, 0.8619, 0.4661),
    "0.15": (0.8009, 0.8595, 0.4760),
}


def lambda_key(text: str) -> str:
    """The ``PAPER_LAMBDA`` key for a lambda as written ("0.1" -> "0.10"); other text as is."""
    try:
        return f"{float(text):.2f}"
    except ValueError:
        return text
