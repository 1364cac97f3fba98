"""The state of one chat with one engine, without a screen (see ``chat.py``)."""
