"""Statistics for the test stage: t confidence intervals, Welch's t-test, Holm (protocols.md §2.4, §4.4)."""

from benchmark.stats.intervals import Interval, holm, t_interval, welch_t_test

__all__ = ["Interval", "holm", "t_interval", "welch_t_test"]
