"""The evaluation protocol: splits, the split loop, results, paired comparisons and the verdict."""
