"""Programs of the corpus the implementation does not pass yet, each with why (see the package
README's "Not yet"). They are not run (not counted as passing); a fix removes its line here."""

KNOWN_GAPS = {
    # wrong results: must be fixed first
    # callees that break but run in Python instead of being captured
    "nested-init_and_property_that_print": "a breaking @property getter runs in Python",
    # recompiles on every call
    "numpy_item-tolist_of_ints_summed": "values read from tensors are guarded by value",
}
