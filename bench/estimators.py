"""make bench's estimators of one target against another over a run's rounds: both shown, with their spread.

The ratio of medians compares each target's typical round; the median of per-round ratios cancels the
host's drift between rounds (both targets of a round ran minutes apart at most) but, on a skewed
sample, can sit on either side of it. Neither is reported without the other, nor without the
per-round ratios' range.
"""

import statistics


def ratio_of_medians(values: list[float], others: list[float]) -> float:
    return statistics.median(values) / statistics.median(others)


def round_ratios(values: list[float], others: list[float]) -> list[float]:
    return [value / other for value, other in zip(values, others, strict=True)]


def compare(values: list[float], others: list[float]) -> dict:
    """{"ratio_of_medians", "median_of_ratios", "min", "max"} of `values` over `others`, round by round."""
    ratios = round_ratios(values, others)
    return {
        "ratio_of_medians": ratio_of_medians(values, others),
        "median_of_ratios": statistics.median(ratios),
        "min": min(ratios),
        "max": max(ratios),
    }
