"""Stand-in for Inductor's config: the cache switch the module hook turns off."""

fx_graph_cache = True
