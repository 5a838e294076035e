"""Cross-node analyses: findings no single node can give, each a registered analysis of
its scope (core/registry.py `analysis`), run by core/analysis.py over a run's results.

- fleet.py (scope "fleet"): drift, outliers and flapping across a run's nodes;
- pairs.py (scope "pairs"): the bandwidth judgement of tests between nodes, localizing the
  slow node or link (its maths in bandwidth/).

The kernel loads them by name (core/plugins.py `ANALYSIS_MODULES`), as it loads checks.
"""
