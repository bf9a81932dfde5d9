"""Statistics for the test stage (protocols.md §2.4, §4): t-intervals, Welch's t-test, Holm, the
two-level (search and training seed) estimator, tiers, power and the published-value TOST."""

from benchmark.stats.intervals import Interval, holm, t_interval, welch_t_test

__all__ = ["Interval", "holm", "t_interval", "welch_t_test"]
