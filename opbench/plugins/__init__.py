"""Plugins: backends and ops from the user's own code, through the public API (opbench.api).

`activate(specs)` loads the installed entry points (groups `opbench.backends` and
`opbench.ops`) and each file or module named with `--plugin`, and lets suites load those their
`plugins:` list names. `provenance()` is what run.json records of them.
"""

from opbench.plugins.loading import activate, provenance

__all__ = ["activate", "provenance"]
