"""The turn: the live turn on the panes (``turn_view``), the forecast before Enter
(``forecasting``), new chat and undo (``chat_undo``), the CPU load beside the turn
(``cpu_watch``) and F2's TTFT waterfall (``waterfall``)."""
