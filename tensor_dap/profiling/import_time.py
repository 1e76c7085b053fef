"""How much of a cProfile run was spent importing, function by function, so the summary can leave it out.

A short profiled run of a training script is mostly imports: nanoGPT's 30 iterations took 0.3 s of a
4.3 s profile, ``import torch`` 2 s and torch.optim's lazy import of dynamo 1.8 s more, so the
tables showed torch's module bodies and ``marshal.loads`` instead of the training step. cProfile
keeps only caller→callee totals, not call paths, so the split is an estimate that assumes a
function's time divides among its callers' contexts as its calls do (gprof's assumption):

* ``inside``: the share of a function's time that ran inside an import (under importlib's frames,
  ``__import__``, ``importlib.import_module`` or a library's module body), from its callers down;
* ``beneath``: the seconds of a function's cumulative time spent importing in what it called (a
  ``configure_optimizers`` whose ``AdamW`` imports dynamo), from its callees up.

A module body of the user's own files, or of a string they ``exec``, is their code, not an import to
leave out. (A string a library execs while imported, as dataclasses do for each class, counts so too: such
bodies share one row per name, called by ``exec`` alone, and one code object's numbers overwrite another's
in ``pstats``, so nothing in the data tells them apart; they take microseconds, a config file may not.)
"""

from __future__ import annotations

from typing import Any, Callable, Iterable, Optional

from ..libraries import is_user_file

Key = tuple[str, int, str]  # pstats' (file, line, function)

_ENTRIES = ("<built-in method builtins.__import__>",)


def importing(key: Key) -> bool:
    """A frame whose whole time is an import."""
    file, _, name = key
    if file.startswith("<frozen importlib"):
        return True
    if file == "~":
        return name in _ENTRIES
    if name == "<module>":  # (a string run by exec, "<string>": the user's, as nanoGPT runs its config files)
        return file.startswith("<frozen") or not (file.startswith("<") or is_user_file(file))
    return name == "import_module" and file.replace("\\", "/").endswith("importlib/__init__.py")


class ImportTime:
    """``inside`` and ``beneath`` for every function of ``stats`` (``pstats.Stats.stats``)."""

    def __init__(self, stats: dict[Key, Any]) -> None:
        self._stats = stats
        callees: dict[Key, dict[Key, float]] = {}
        for callee, (*_, callers) in stats.items():
            for caller, edge in callers.items():
                callees.setdefault(caller, {})[callee] = edge[3]
        self._imports = {k for k in stats if importing(k)}
        fixed = {k: 1.0 if k in self._imports else 0.0 for k in stats if k in self._imports or k[2] == "<module>"}
        self.inside = _settle(stats, lambda k: [c for c in stats[k][4] if c in stats], self._share, fixed,
                              revisit=True)
        below = {k: stats[k][3] for k in self._imports}
        self.beneath = _settle(stats, lambda k: callees.get(k, ()), self._below(callees), below)

    def _share(self, key: Key, done: dict[Key, float]) -> Optional[float]:
        """The callers' shares, weighted by the time each call edge took; None while no caller is settled. A caller
        not settled yet (recursion: torch's op namespaces reach their own ``__getattr__`` again through a
        generator; ``inspect.getmodule`` and ``getabsfile`` call each other) does not count: read as 0, it took
        functions called almost only by module bodies for ones that ran after the imports."""
        callers = self._stats[key][4]
        known = [(edge[3], done[caller]) for caller, edge in callers.items() if caller in done]
        if not known and any(caller in self._stats for caller in callers):
            return None
        total = sum(seconds for seconds, _ in known)
        return sum(seconds * share for seconds, share in known) / total if total else 0.0

    def _below(self, callees: dict[Key, dict[Key, float]]) -> Callable[[Key, dict[Key, float]], float]:
        """``beneath``: a library's module body is reached only through importlib's frames (``exec`` runs those
        and the user's script alike: counting the bodies under it would count each import twice)."""
        stats = self._stats

        def below(key: Key, done: dict[Key, float]) -> float:
            seconds = 0.0
            for callee, edge in callees.get(key, {}).items():
                if callee[2] == "<module>" and callee in self._imports:
                    continue  # a library's module body runs inside importlib's frames, counted where they were entered
                whole = stats[callee][3]  # (callees are keys of stats: every callee has its own row)
                if whole > 0:  # (the edge's share of the callee's imports)
                    seconds += edge * min(done.get(callee, 0.0) / whole, 1.0)
            return min(seconds, stats[key][3])
        return below

    def own(self, key: Key) -> float:
        """Own seconds spent outside imports."""
        return self._stats[key][2] * (1.0 - self.inside.get(key, 0.0))

    def cumulative(self, key: Key) -> float:
        """Cumulative seconds with the imports it ran, and those it ran inside, taken out."""
        ct = self._stats[key][3]
        return max(ct - self.beneath.get(key, 0.0), 0.0) * (1.0 - self.inside.get(key, 0.0))

    def total(self) -> tuple[float, float]:
        """(seconds importing, seconds profiled), over the functions nothing profiled called."""
        roots = [k for k, v in self._stats.items() if not v[4]]
        profiled = sum(self._stats[k][3] for k in roots)
        return min(sum(self.beneath.get(k, 0.0) for k in roots), profiled), profiled


Row = tuple[str, int, str, float, float, int]  # (file, line, function, own seconds, cumulative seconds, calls)

# ``exec``, which every import and the script itself pass through: by cumulative time it is as large as what it ran
# (importlib's frames, the other such plumbing, are ``importing``: all import)
_EXEC = "<built-in method builtins.exec>"


def program_rows(stats: dict[Key, Any], imports: ImportTime, left_out: Callable[[str], bool]) -> list[Row]:
    """Every function of the program that ran outside imports, its seconds spent importing taken out: what the
    tables of ``profile --mode cpu`` and the extension's profile page list. ``left_out(file)``: frames that are
    not the program's (the profiler's own, which ran it)."""
    out = []
    for key, (_, calls, _, _, _) in stats.items():
        file, line, name = key
        if left_out(file) or importing(key) or (file == "~" and name == _EXEC):
            continue
        own, cumulative = imports.own(key), imports.cumulative(key)
        if cumulative > 0 or own > 0:
            out.append((file, line, name, own, cumulative, calls))
    return out


def _settle(keys: Iterable[Key], deps: Callable[[Key], Iterable[Key]],
            value: Callable[[Key, dict[Key, float]], Optional[float]], fixed: dict[Key, float],
            revisit: bool = False) -> dict[Key, float]:
    """``value(k, done)`` for every key after the keys it depends on (a post-order walk without recursion:
    call graphs run deep); a dependency on a key still being walked (recursion) is not in ``done`` yet. A key
    whose value is None then (it depends only on such keys) is settled after the walk, from the values known by
    then (0 if none ever is). With ``revisit``, so is again every key computed while one of its dependencies was
    not settled, in the walk's order."""
    done = dict(fixed)
    deferred: dict[Key, None] = {}  # (ordered)
    partial: list[Key] = []  # computed while a dependency was not settled
    walking: set[Key] = set()
    for root in keys:
        if root in done or root in deferred:
            continue
        walking.add(root)
        stack = [(root, iter(deps(root)))]
        while stack:
            key, pending = stack[-1]
            for dep in pending:
                if dep not in done and dep not in walking and dep not in deferred:
                    walking.add(dep)
                    stack.append((dep, iter(deps(dep))))
                    break
            else:
                stack.pop()
                walking.discard(key)
                settled = value(key, done)
                if settled is None:
                    deferred[key] = None
                    continue
                done[key] = settled
                if revisit and not all(dep in done for dep in deps(key)):
                    partial.append(key)
    while deferred:
        now = {key: v for key in deferred if (v := value(key, done)) is not None}
        if not now:
            break
        done.update(now)
        deferred = {key: None for key in deferred if key not in now}
    done.update(dict.fromkeys(deferred, 0.0))
    for key in partial:
        done[key] = value(key, done) or 0.0
    return done
