"""This machine's measured efficiency for one model and its settings, and the
forecasts made from it (issue: "forecasts that predict")."""
