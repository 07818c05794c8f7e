"""One script per figure and table of the paper (``rlvr reproduce <name>``): ``fig1``..``fig4``,
``table_kk``, ``table_math``, ``table_qa``, ``sweep`` and ``all`` (every one, then REPORT.md).
Shared pieces: ``profiles`` (tiny / paper), ``runs`` (the run cache), ``report``."""
