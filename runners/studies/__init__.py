"""Many-run studies (``python -m runners.study KIND``): the kinds, each a plug-in module
(``worlds``, ``paper``, ``sweep``), and what they share."""
