"""Evaluation: metrics (``metrics``), statistics over seeds (``stats``), the evaluation runner
(``runner``), and token statistics for Figure 1 (``token_stats``). Import the submodules; this
package imports nothing heavy on its own."""
