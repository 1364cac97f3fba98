"""Engine events to screen: the one reader's table from engine event to message
(``bridge``), the workers that post them, the App's routing of messages and keys
(``routing``) and the engine's start, restart and shutdown (``lifecycle``)."""
