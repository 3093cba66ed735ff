"""Stand-in for functorch's config: the cache switch the module hook turns off."""

enable_autograd_cache = True
