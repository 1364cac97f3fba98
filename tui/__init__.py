"""kvtop's Textual UI. Importing this package imports nothing heavy; see ``tui.app``."""
