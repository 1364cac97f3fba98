"""A llama-server, a fleet and ``kvtop load``: the server's own messages routed
(``server_routing``) and the live load view (``load_view``)."""
