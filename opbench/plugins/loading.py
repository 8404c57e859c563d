"""Find and load plugins: installed entry points, files and modules named with `--plugin` or
in a suite's `plugins:` list. Every `opbench.api.Backend` or `opbench.api.Op` subclass a
plugin defines (with a `name`) is registered through the same path as the built-ins.

Each failure is an InputError (exit 2) naming the plugin: an import that raises (with the
error's last line), an entry point that names something else, a name that shadows a
built-in or another plugin's, a plugin that defines nothing to register.
"""

from __future__ import annotations

import hashlib
import importlib
import importlib.util
import sys
from collections.abc import Iterable, Sequence
from importlib import metadata
from pathlib import Path
from types import ModuleType
from typing import Any

from opbench import api, vocabulary
from opbench.backends.registry import register_backend
from opbench.errors import InputError, Location
from opbench.ops.registry import register_op
from opbench.plugins.adapters import PluginBackend, PluginOp, last_line

GROUPS: dict[str, type] = {"opbench.backends": api.Backend, "opbench.ops": api.Op}

# What is loaded: source key (resolved path, module or distribution name) -> provenance.
_provenance: dict[str, dict[str, str]] = {}
# Every class registered, with the name it registered: the same class seen twice is skipped.
_registered: set[type] = set()
_entry_points_loaded = False


def activate(specs: Sequence[str] = (), base: Path | None = None) -> None:
    """Load the installed entry points (once per process) and each plugin in `specs` (paths
    relative to `base`, default the working directory), and let suites load theirs."""
    vocabulary.set_plugin_loader(load_plugins)
    load_entry_points()
    load_plugins(specs, base or Path.cwd())


def load_plugins(specs: Sequence[str], base: Path) -> None:
    for spec in specs:
        load_plugin(spec, base)


def provenance() -> list[dict[str, str]]:
    """What run.json records under env["plugins"]: {"name", "version"} for each distribution,
    {"path", "sha256"} for each file or uninstalled module, in load order."""
    unique = {tuple(sorted(entry.items())): entry for entry in _provenance.values()}
    return [dict(entry) for entry in unique.values()]


# ---- entry points ---------------------------------------------------------------------------


def load_entry_points() -> None:
    global _entry_points_loaded
    if _entry_points_loaded:
        return
    _entry_points_loaded = True
    for group, base_class in GROUPS.items():
        for entry in metadata.entry_points(group=group):
            dist = entry.dist
            dist_name = dist.name if dist is not None else "?"
            version = dist.version if dist is not None else "?"
            label = f"{dist_name} {version} (entry point {entry.name} = {entry.value})"
            try:
                obj = entry.load()
            except Exception as exc:
                raise _failed(f"plugin {label} failed to import: {last_line(exc)}") from None
            if not (isinstance(obj, type) and issubclass(obj, base_class)):
                raise _failed(
                    f"plugin {label}: {group} entries name a subclass of "
                    f"opbench.api.{base_class.__name__}, not {obj!r}"
                )
            if not obj.name:
                raise _failed(f"plugin {label}: {obj.__name__} sets no `name`")
            _register(obj, f"{dist_name} {version}")
            _provenance.setdefault(f"dist:{dist_name}", {"name": dist_name, "version": version})


# ---- files and modules ----------------------------------------------------------------------


def _is_path(spec: str) -> bool:
    return spec.endswith(".py") or "/" in spec or "\\" in spec or spec.startswith(".")


def load_plugin(spec: str, base: Path) -> None:
    """Load one plugin file (`x.py`, a package folder) or importable module (`pkg.mod`)."""
    if _is_path(spec):
        path = (base / spec).resolve()
        key = f"path:{path}"
        if key in _provenance:
            return
        if not path.exists():
            raise _failed(f"plugin {spec!r}: no such file")
        module = _import_file(spec, path)
        origin = str(path)
        record = {"path": str(path), "sha256": _sha256(path)}
    else:
        key = f"module:{spec}"
        if key in _provenance:
            return
        try:
            module = importlib.import_module(spec)
        except Exception as exc:
            raise _failed(f"plugin {spec!r} failed to import: {last_line(exc)}") from None
        origin = f"module {spec}"
        record = _module_provenance(spec, module)
    found = _plugin_classes(module)
    if not found:
        raise _failed(
            f"plugin {spec!r} defines no subclass of opbench.api.Backend or opbench.api.Op "
            "with a `name`"
        )
    for cls in found:
        _register(cls, origin)
    _provenance[key] = record


def _import_file(spec: str, path: Path) -> ModuleType:
    init = path / "__init__.py" if path.is_dir() else path
    if not init.is_file():
        raise _failed(f"plugin {spec!r}: neither a .py file nor a package folder")
    digest = hashlib.sha256(str(path).encode()).hexdigest()[:10]
    name = f"opbench_plugin_{path.stem.replace('-', '_')}_{digest}"
    locations = [str(path)] if path.is_dir() else None
    module_spec = importlib.util.spec_from_file_location(
        name, init, submodule_search_locations=locations
    )
    if module_spec is None or module_spec.loader is None:
        raise _failed(f"plugin {spec!r}: cannot be imported as Python")
    module = importlib.util.module_from_spec(module_spec)
    sys.modules[name] = module  # dataclasses and pickling look the module up by name
    try:
        module_spec.loader.exec_module(module)
    except BaseException as exc:
        sys.modules.pop(name, None)
        if isinstance(exc, KeyboardInterrupt):
            raise
        raise _failed(f"plugin {spec!r} failed to import: {last_line(exc)}") from None
    return module


def _plugin_classes(module: ModuleType) -> list[type]:
    """The Backend and Op subclasses the module (or a submodule of it) defines, with a name;
    classes it merely imports from elsewhere are left to their own plugin."""
    prefix = module.__name__
    found = []
    for obj in vars(module).values():
        if (
            isinstance(obj, type)
            and issubclass(obj, tuple(GROUPS.values()))
            and obj not in GROUPS.values()
            and (obj.__module__ == prefix or obj.__module__.startswith(prefix + "."))
            and obj.name
        ):
            found.append(obj)
    return found


def _register(cls: type, origin: str) -> None:
    if cls in _registered:
        return
    try:
        if issubclass(cls, api.Backend):
            register_backend(
                cls.name, lambda: PluginBackend(cls), origin, triton=bool(cls.uses_triton)
            )
        else:
            try:
                op = PluginOp(cls())  # a bad `arity` fails here, naming the op
            except Exception as exc:
                raise _failed(f"plugin op {cls.__name__} ({origin}): {last_line(exc)}") from None
            register_op(op, origin)
    except vocabulary.NameClash as exc:
        raise _failed(str(exc)) from None
    _registered.add(cls)


# ---- provenance -----------------------------------------------------------------------------


def _module_provenance(spec: str, module: ModuleType) -> dict[str, str]:
    """An installed distribution's name and version, else the module's own files' hash."""
    top = spec.split(".")[0]
    for dist_name in metadata.packages_distributions().get(top, []):
        try:
            return {"name": dist_name, "version": metadata.version(dist_name)}
        except metadata.PackageNotFoundError:
            continue
    where = Path(getattr(module, "__file__", None) or spec)
    root = where.parent if where.name == "__init__.py" else where
    return {"path": str(root), "sha256": _sha256(root)}


def _sha256(path: Path) -> str:
    """A file's content hash; for a folder, of every .py file in it (names and contents)."""
    digest = hashlib.sha256()
    files: Iterable[Path] = sorted(path.rglob("*.py")) if path.is_dir() else [path]
    for file in files:
        if path.is_dir():
            digest.update(str(file.relative_to(path)).encode())
        try:
            digest.update(file.read_bytes())
        except OSError:
            continue
    return digest.hexdigest()


def _failed(message: str) -> InputError:
    return InputError(message, Location())


# ---- tests ----------------------------------------------------------------------------------


def snapshot() -> Any:
    """Everything loading changes, for `restore` (tests load plugins, then put things back)."""
    from opbench.backends import registry as backends
    from opbench.ops import registry as ops

    return (
        vocabulary.snapshot(),
        backends.snapshot(),
        ops.snapshot(),
        dict(_provenance),
        set(_registered),
        _entry_points_loaded,
    )


def restore(state: Any) -> None:
    global _entry_points_loaded
    from opbench.backends import registry as backends
    from opbench.ops import registry as ops

    vocab, backend_state, op_state, provenance_state, registered, loaded = state
    vocabulary.restore(vocab)
    backends.restore(backend_state)
    ops.restore(op_state)
    _provenance.clear()
    _provenance.update(provenance_state)
    _registered.clear()
    _registered.update(registered)
    _entry_points_loaded = loaded
