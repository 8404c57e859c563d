# A package, so that its conftest is `importers.conftest` and not a second `conftest` module
# (tests/unit/export's tests import theirs by that name).
