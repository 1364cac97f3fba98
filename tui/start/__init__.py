"""Start and quit: the ``kvtop`` command's subcommands (``cli``), a local model or a trace
(``launch``), a server (``launch_server``), and the app's loop, signals and the summary
on quit (``run``)."""
