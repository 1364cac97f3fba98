"""One module per pane. Each pane keeps the figures it shows and renders them as
``Content`` (never markup), so untrusted text cannot become a link or an action."""
