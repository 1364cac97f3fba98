"""What every screen of kvtop uses and that knows no pane: number formats, the app's
messages, options and config, the palette's commands, the prompt's input, the quit
summary, the dialogs (``screens``) and every private Textual call (``textual_private``)."""
