"""The HTML report: the runs it draws (``runs``), its charts (``charts``), the page
(``page``), and a sweep's figures and summary (``sweep``, also the sweep command's table)."""
