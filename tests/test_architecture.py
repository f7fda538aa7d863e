"""The layers are kept by a tool, not a promise: the import-linter contracts in
pyproject.toml ([tool.importlinter]) fail this test on an upward import, an import
circle between sibling modules or packages, or a Locust import outside workload.locust."""

from __future__ import annotations

import ast
import builtins
import hashlib
import re
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parents[1]


def test_import_contracts_are_kept():
    p = subprocess.run(
        [sys.executable, "-c", "import sys; from importlinter.cli import lint_imports; "
         "sys.exit(lint_imports(no_cache=True, no_logo=True))"],
        capture_output=True, text=True, cwd=ROOT, timeout=300,
    )  # fmt: skip
    assert p.returncode == 0, p.stdout[-4000:] + p.stderr[-2000:]


def test_the_contract_names_every_top_level_room():
    # A new room must be placed on a floor, or the layers contract cannot guard it.
    import tomllib

    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())
    (layers,) = [c for c in conf["tool"]["importlinter"]["contracts"] if c["type"] == "layers"]
    named = {m.strip() for layer in layers["layers"] for m in layer.split("|")}
    rooms = {
        f"workload.{p.stem if p.is_file() else p.name}"
        for p in (ROOT / "workload").iterdir()
        if (p.is_dir() and (p / "__init__.py").exists())
        or (p.suffix == ".py" and p.name != "__init__.py")
    }
    assert rooms == named, f"unplaced: {sorted(rooms - named)}; missing: {sorted(named - rooms)}"


# ---------------------------------------------------------------- the units and the import graph
# The rules in docs/internals.md ("Units and imports"), checked on the source (AST, no import:
# importing workload.locust's modules would patch this interpreter).

PACKAGE = ROOT / "workload"
MAX_MODULE_LINES = 600
MAX_FUNCTION_LINES = 80
LONG_REASON = "Long because"  # a longer function's docstring says why, after this phrase
LOCAL_IMPORTS_PER_1000 = 2.0
IMPORT_REASONS = ("# start-up:", "# deferred:")  # on the import's line(s) or the line before
# Exceptions outside workload/errors.py: control flow inside one room, never a user's error
# (each is caught in its own room and becomes data, an HTTP answer or an exit code there).
CONTROL_FLOW_EXCEPTIONS = {
    "workload/plan/traces/_read.py:_Bad": "one bad trace row, collected as a BadLine",
    "workload/stopping.py:StoppedBeforeRun": "a signal before traffic (BaseException on purpose)",
    "workload/sim/validate.py:BadRequest": "the simulator's 4xx answer, vLLM's error JSON",
    "workload/sim/engine.py:QueueFull": "the simulator's full queue, answered as a 503",
    "workload/measure/client.py:_Deadline": "a request's deadline inside the measured exchange",
    "workload/measure/transport.py:TransportError": "a classified transport failure: a record",
    "workload/locust/runtime.py:RequestFailed": "what Locust's stats show for a failed request",
    "workload/orchestrate/canary/servers.py:StartupFailure": "a side failed to start: a verdict",
    "workload/measure/http1.py:FramingError": "a message the proxy cannot frame: a 400/502 answer",
    "workload/record/proxy.py:_Gone": "the client hung up mid-exchange: a record marked client_gone",
    "workload/record/proxy.py:_UpstreamFailed": "the upstream broke off: a 502 and a record",
}


def _modules() -> list[tuple[str, str, ast.Module]]:
    out = []
    for p in sorted(PACKAGE.rglob("*.py")):
        src = p.read_text(encoding="utf-8")
        out.append((p.relative_to(ROOT).as_posix(), src, ast.parse(src)))
    return out


def _is_type_checking(node: ast.AST) -> bool:
    t = getattr(node, "test", None)
    return isinstance(node, ast.If) and (
        (isinstance(t, ast.Name) and t.id == "TYPE_CHECKING")
        or (isinstance(t, ast.Attribute) and t.attr == "TYPE_CHECKING")
    )


def _local_imports(tree: ast.Module) -> list[ast.Import | ast.ImportFrom]:
    """Imports inside a function body (not those under `if TYPE_CHECKING:`)."""
    found: list[ast.Import | ast.ImportFrom] = []

    def walk(node: ast.AST, in_function: bool) -> None:
        for child in ast.iter_child_nodes(node):
            if _is_type_checking(child):
                continue
            if in_function and isinstance(child, (ast.Import, ast.ImportFrom)):
                found.append(child)
            walk(child, in_function or isinstance(child, (ast.FunctionDef, ast.AsyncFunctionDef)))

    walk(tree, False)
    return found


def test_function_local_imports_are_few_and_each_says_why():
    total_lines, local, unexplained = 0, 0, []
    for path, src, tree in _modules():
        lines = src.splitlines()
        total_lines += len(lines)
        for imp in _local_imports(tree):
            local += 1
            around = lines[imp.lineno - 2 : imp.end_lineno]  # the line before, then the import
            if not any(reason in line for line in around for reason in IMPORT_REASONS):
                unexplained.append(f"{path}:{imp.lineno}: {ast.unparse(imp)}")
    assert not unexplained, (
        "a function-local import needs a `# start-up: ...` (measured import time it saves) or "
        "`# deferred: ...` comment, else it belongs at the module top:\n" + "\n".join(unexplained)
    )
    per_1000 = 1000 * local / total_lines
    assert per_1000 <= LOCAL_IMPORTS_PER_1000, f"{local} local imports: {per_1000:.2f} per 1,000"


def test_no_module_is_over_600_lines():
    long = [f"{path}: {len(src.splitlines())}" for path, src, _ in _modules()
            if len(src.splitlines()) > MAX_MODULE_LINES]  # fmt: skip
    assert not long, "split these modules (at most 600 lines):\n" + "\n".join(long)


def test_a_function_over_80_lines_says_why_in_its_docstring():
    unexplained = []
    for path, _, tree in _modules():
        for node in ast.walk(tree):
            if not isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef)):
                continue
            length = node.end_lineno - node.lineno + 1  # type: ignore[operator]
            if length > MAX_FUNCTION_LINES and LONG_REASON not in (ast.get_docstring(node) or ""):
                unexplained.append(f"{path}:{node.lineno} {node.name}: {length} lines")
    assert not unexplained, (
        f"split these, or say why in the docstring ({LONG_REASON!r} ...):\n"
        + "\n".join(unexplained)
    )


def _exception_names() -> set[str]:
    """Builtin exception names and the classes workload/errors.py defines."""
    names = {
        n for n, v in vars(builtins).items() if isinstance(v, type) and issubclass(v, BaseException)
    }
    errors = ast.parse((PACKAGE / "errors.py").read_text(encoding="utf-8"))
    return names | {n.name for n in errors.body if isinstance(n, ast.ClassDef)}


def test_exceptions_live_in_the_one_error_module():
    bases_ok = _exception_names()
    found = set()
    for path, _, tree in _modules():
        if path == "workload/errors.py":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                bases = {
                    b.id if isinstance(b, ast.Name) else getattr(b, "attr", "") for b in node.bases
                }
                if bases & bases_ok:
                    found.add(f"{path}:{node.name}")
    unlisted = sorted(found - set(CONTROL_FLOW_EXCEPTIONS))
    assert not unlisted, (
        "an exception class outside workload/errors.py: move it there (a user's error is an "
        "AgentloadError), or list it above as control flow with its reason:\n" + "\n".join(unlisted)
    )
    assert not set(CONTROL_FLOW_EXCEPTIONS) - found, "listed but gone: drop it from the list"


_ERROR_LINE = re.compile(r"[\w-]+: error:")


def _literal_text(node: ast.AST) -> str:
    return " ".join(
        n.value for n in ast.walk(node) if isinstance(n, ast.Constant) and isinstance(n.value, str)
    )


def _writes_stderr(call: ast.Call) -> bool:
    f = call.func
    if isinstance(f, ast.Name) and f.id == "print":
        return any(k.arg == "file" and "stderr" in ast.unparse(k.value) for k in call.keywords)
    return isinstance(f, ast.Attribute) and f.attr == "write" and "stderr" in ast.unparse(f.value)


def test_the_error_line_is_written_only_by_print_error():
    found = []
    for path, _, tree in _modules():
        if path == "workload/errors.py":
            continue
        for node in ast.walk(tree):
            if isinstance(node, ast.Call) and _writes_stderr(node):
                if "error:" in _literal_text(node):
                    found.append(f"{path}:{node.lineno}: {ast.unparse(node)[:80]}")
            elif (
                isinstance(node, ast.Constant)
                and isinstance(node.value, str)
                and _ERROR_LINE.search(node.value)
            ):
                found.append(f"{path}:{node.lineno}: {node.value[:80]!r}")
    assert not found, (
        "the `agentload: error: ...` line comes from workload.errors.print_error (raise an "
        "AgentloadError, or call print_error):\n" + "\n".join(found)
    )


def test_a_warning_printed_on_stderr_comes_from_print_warning():
    found = [
        f"{path}:{node.lineno}: {ast.unparse(node)[:80]}"
        for path, _, tree in _modules()
        if path != "workload/errors.py"
        for node in ast.walk(tree)
        if isinstance(node, ast.Call) and _writes_stderr(node) and "warning:" in _literal_text(node)
    ]
    assert not found, (
        "a `agentload: warning: ...` line on stderr comes from workload.errors.print_warning:\n"
        + "\n".join(found)
    )


def test_print_warning_writes_one_line(capsys):
    from workload.errors import print_warning

    print_warning("two\nlines")
    assert capsys.readouterr().err == "agentload: warning: two lines\n"


STRICT_PACKAGES = ["workload.run.*", "workload.measure.*", "workload.analyze.*"]
# What --strict turns on that a module override can hold (mypy takes `strict` itself
# only globally); warn_redundant_casts and warn_unused_configs are global-only.
STRICT_FLAGS = {
    "disallow_any_generics": True, "disallow_subclassing_any": True,
    "disallow_untyped_calls": True, "disallow_untyped_defs": True,
    "disallow_incomplete_defs": True, "check_untyped_defs": True,
    "disallow_untyped_decorators": True, "warn_unused_ignores": True,
    "warn_return_any": True, "implicit_reexport": False, "strict_equality": True,
    "extra_checks": True,
}  # fmt: skip


def test_run_measure_and_analyze_are_checked_strict():
    import tomllib  # Python 3.11+ (the package supports 3.10)

    conf = tomllib.loads((ROOT / "pyproject.toml").read_text())["tool"]["mypy"]
    assert conf["files"] == ["workload"]
    assert "ignore_missing_imports" not in conf  # per library, in an override
    (strict,) = [o for o in conf["overrides"] if o["module"] == STRICT_PACKAGES]
    assert {k: strict.get(k) for k in STRICT_FLAGS} == STRICT_FLAGS


def test_run_measure_and_analyze_type_check_strict():
    # Plain `mypy`, as a contributor runs it: pyproject's files and per-module strictness.
    # The cache lives in the temp dir, one per checkout, so a rerun checks only what changed.
    # mypy is in the dev extra: without it this fails (No module named mypy), never skips.
    tag = hashlib.sha1(str(ROOT).encode()).hexdigest()[:10]
    cache = Path(tempfile.gettempdir()) / f"agentload-mypy-{tag}"
    p = subprocess.run(
        [sys.executable, "-m", "mypy", "--cache-dir", str(cache), "--no-error-summary"],
        capture_output=True, text=True, cwd=ROOT, timeout=600,
    )  # fmt: skip
    assert p.returncode == 0, "mypy found:\n" + p.stdout[-8000:] + p.stderr[-2000:]
