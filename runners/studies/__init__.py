"""Many-run studies (``python -m runners.study KIND``): the kinds, each a plug-in module
(``worlds``, ``gravity``, ``paper``, ``sweep``: its options, plan and report), and what they share:
the grid, the launch (options, plans, checks), where runs execute (local or Ray), reading finished
runs and their aggregates, statistics, analyses, figures and the reports."""
