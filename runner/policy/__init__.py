"""Policies that decide from sizes alone, with no llama.cpp and no machine: which turns
of a chat a prompt keeps when it no longer fits the context (``context_shift``). The
engine applies them, the physics and the screens explain them."""
