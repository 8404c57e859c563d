"""Matching: reference rows ↔ suite layers, between the reference readers and compare.

    reference profile ─┐
                       ├─► links.match_model (per model: which rows cover which layers, and
    run (suite side) ──┘        which covers are ambiguous)
                            select.match_reference (which models; nothing matched: exit 2)
                            groups.group_model (rows + layers compared together; MISSING)

Module map: names.py (normalising names and op types), namemap.py (the --map file),
suite_layers.py (the suite side, from a run), links.py (the rules; signature.py the last
one), select.py (model selection and the checks on a match), groups.py (grouping).
Pure Python: no torch, no triton.
"""
