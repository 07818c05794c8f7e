"""One script per figure and table of the paper (``rlvr reproduce <name>``): ``fig1``..``fig4``,
``table_kk``, ``table_math``, ``table_qa``, ``sweep`` and ``all`` (every one, then REPORT.md).

Imports point one way: the core (``grid``: the grids; ``gpu_plan``: their GPU plan; ``keys``:
run and evaluation keys; ``runs``: the run cache; ``sft_reference``; ``plan``: every run the
named figures need, each identity computed once; ``pool``: ``--jobs``; ``common``: outputs with
provenance) imports no figure; the figures (registered in ``figures``, each declaring its caption,
its place in the report and ``needs(ctx)``) read their runs from the plan; ``verl`` writes the
plan's runs as verl launch folders and reads them back; the report part (``report``,
``compare``, ``check``) reads what they wrote; ``cli`` and ``parallel`` sit on top
(``tests/test_imports.py`` holds the direction)."""
