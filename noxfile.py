"""Sessions that build, test and run torchkiln.

`nox -s tests` is what CI runs: every package's own tests plus the end-to-end tests in tests/.
`nox -s pkg-<folder>` installs one package from its built wheel with only its declared
dependencies and runs its tests (this proves each layer installs and works alone).
`nox -s bench` is the main job: compile and benchmark the bundled model zoo on the CPU.
`nox -s tests-py312` runs the suites Python's bytecode version touches on Python 3.12 (not in CI).
"""

from __future__ import annotations

import tomllib
from pathlib import Path

import nox

ROOT = Path(__file__).parent
TORCH = "torch==2.13.0"  # the CPU wheel on disk; installed first so nothing pulls a CUDA build
TEST_TOOLS = ["pytest>=8", "pytest-xdist>=3", "pytest-timeout>=2"]

# folder -> distribution name, in dependency order (a package comes after its siblings).
PACKAGES = {
    "guards": "torchkiln-guards",
    "dynamo-capture": "torchkiln-dynamo-capture",
    "aot-partition": "torchkiln-aot-partition",
    "loop-ir": "torchkiln-loop-ir",
    "codegen-triton": "torchkiln-codegen-triton",
    "codegen-cpp": "torchkiln-codegen-cpp",
    "torchkiln": "torchkiln",
}
DIST_TO_FOLDER = {dist: folder for folder, dist in PACKAGES.items()}
# Optional extras a package's own tests exercise: the --plot test of the benchmark command, capture's
# numpy programs (its "numpy" extra), and
# capture's conformance programs on real transformers models (a test-only need, not a dependency).
# torchkiln's own tests are CPU-only, so pkg-torchkiln installs it without its "triton" extra:
# that session is the proof that a CPU-only install (no triton, no codegen-triton) works. The
# `tests` session installs every package, codegen-triton and so triton included, for the
# Triton-interpreter tests.
TEST_EXTRAS = {"torchkiln": "[plot]", "dynamo-capture": "[numpy]"}
# transformers below the next minor release: each release is tried before the bound moves
# (5.25, with the `kernels` package's hub-kernel wrappers, needed dynamo-capture 0.9.7).
TRANSFORMERS = "transformers>=4.40,<5.26"
TEST_REQUIREMENTS = {"dynamo-capture": [TRANSFORMERS]}

nox.options.sessions = ["tests"]
nox.options.default_venv_backend = "venv"


def _sibling_deps(folder: str) -> list[str]:
    """Folders of the sibling packages `folder` declares (in its dependencies or its extras, so
    an extra's wheel is there if asked for), transitively, dependencies first."""
    meta = tomllib.loads((ROOT / "packages" / folder / "pyproject.toml").read_text())["project"]
    extras = [r for group in meta.get("optional-dependencies", {}).values() for r in group]
    found: list[str] = []
    for requirement in [*meta["dependencies"], *extras]:
        name = requirement.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip()
        if name in DIST_TO_FOLDER:
            for dep in [*_sibling_deps(DIST_TO_FOLDER[name]), DIST_TO_FOLDER[name]]:
                if dep not in found:
                    found.append(dep)
    return found


def _install_all_editable(session: nox.Session) -> None:
    session.install(TORCH)
    session.install(*[f"-e{ROOT / 'packages' / folder}" for folder in PACKAGES])


@nox.session
def tests(session: nox.Session) -> None:
    """Every package's tests and the end-to-end tests, in one environment."""
    _install_all_editable(session)
    session.install(*TEST_TOOLS, TRANSFORMERS, "matplotlib")
    _pytest(session, [f"packages/{folder}/tests" for folder in PACKAGES] + ["tests"])


def _pytest(session: nox.Session, paths: list[str]) -> None:
    """pytest over ``paths`` on two workers, Triton kernels in its interpreter (no GPU). Run as
    ``python -m pytest``, which puts the working directory on ``sys.path``: the distributed
    test's spawned workers import its module by the name pytest gave it
    (``packages.torchkiln.tests.test_distributed``), which the ``pytest`` script's path lacks
    (Python 3.12: ten errors)."""
    session.run(
        "python",
        "-m",
        "pytest",
        "-n",
        "2",
        "--timeout",
        "900",
        *paths,
        *session.posargs,
        env={"TRITON_INTERPRET": "1"},
    )


@nox.session(python="3.12", name="tests-py312")
def tests_py312(session: nox.Session) -> None:
    """The suites Python's bytecode version touches (capture, guards, aot-partition, the
    meta-package, and the end-to-end tests through continuations and custom Functions) on
    Python 3.12, on the CPU: not in CI (which runs 3.11), for a developer with a python3.12 on
    PATH. PyPI has no CPU wheel of torch for 3.12 here, so the CUDA build comes (several GB), and
    triton 3.9 after it: the CUDA build pins 3.7.1, whose interpreter rounds some float floor
    divisions and special values otherwise (five end-to-end tests, session 30)."""
    _install_all_editable(session)
    session.install(*TEST_TOOLS, TRANSFORMERS, "triton>=3.9")
    suites = ["dynamo-capture", "guards", "aot-partition", "torchkiln"]
    end_to_end = ["capture_corpus", "autograd_function", "numpy", "control_flow"]
    _pytest(
        session,
        [f"packages/{folder}/tests" for folder in suites]
        + [f"tests/test_{name}_e2e.py" for name in end_to_end]
        + ["tests/test_poisoned_outputs.py", "tests/test_longformer_training_patterns.py"],
    )


def _package_session(folder: str):
    def run(session: nox.Session) -> None:
        wheel_dir = Path(session.create_tmp()) / "wheels"
        wheel_dir.mkdir(exist_ok=True)
        for old in wheel_dir.glob("*.whl"):
            old.unlink()
        session.install(TORCH, *TEST_TOOLS, "build")
        for dep in [*_sibling_deps(folder), folder]:
            session.run(
                "python",
                "-m",
                "build",
                "--wheel",
                "--outdir",
                str(wheel_dir),
                str(ROOT / "packages" / dep),
                silent=True,
            )
        # Installed by distribution name: pip resolves siblings from the wheels just built and
        # third-party dependencies from the index, exactly as the pyproject declares them.
        session.install(
            "--find-links",
            str(wheel_dir),
            PACKAGES[folder] + TEST_EXTRAS.get(folder, ""),
            *TEST_REQUIREMENTS.get(folder, []),
        )
        session.run(
            "pytest",
            "-n",
            "2",
            "--timeout",
            "900",
            "-p",
            "no:cacheprovider",
            str(ROOT / "packages" / folder / "tests"),
            *session.posargs,
        )

    run.__doc__ = f"{PACKAGES[folder]} from its wheel, with only its declared dependencies."
    return run


for _folder in PACKAGES:
    nox.session(name=f"pkg-{_folder}")(_package_session(_folder))


@nox.session
def fuzz(session: nox.Session) -> None:
    """Many more fuzzed programs than CI runs: `nox -s fuzz -- --programs 10000 --seed 0`
    prints wrong/fallback/crash counts and the seeds that failed (tests/fuzz/run.py)."""
    _install_all_editable(session)
    args = session.posargs or ["--programs", "2000", "--seed", "0"]
    session.run("python", "-m", "tests.fuzz.run", *args, env={"TRITON_INTERPRET": "1"})


@nox.session
def lint(session: nox.Session) -> None:
    """ruff with the rule set in pyproject.toml, and ruff format (the code as the formatter
    writes it; CI runs both before the tests); the version is
    pinned so a new ruff release cannot fail CI on code nobody changed."""
    session.install("ruff==0.17.6")
    session.run("ruff", "check", "packages", "tests", "benchmarks", "noxfile.py")
    session.run("ruff", "format", "--check", "packages", "tests", "benchmarks", "noxfile.py")


def _third_party_requirements(skip: set[str]) -> list[str]:
    """Every package's declared third-party dependencies (not siblings, not extras), less `skip`."""
    found: list[str] = []
    for folder in PACKAGES:
        meta = tomllib.loads((ROOT / "packages" / folder / "pyproject.toml").read_text())["project"]
        for requirement in meta["dependencies"]:
            name = requirement.split(">")[0].split("<")[0].split("=")[0].split("[")[0].strip()
            if name not in DIST_TO_FOLDER and name not in skip and requirement not in found:
                found.append(requirement)
    return found


@nox.session
def typecheck(session: nox.Session) -> None:
    """mypy over the public API of every package (the files and settings are `[tool.mypy]` in
    pyproject.toml; CI runs it before the tests). Pinned like ruff. The packages are read from
    their sources; their dependencies are installed for their types, except triton (untyped,
    and large: mypy reads it as Any either way)."""
    session.install(TORCH)
    session.install("mypy==1.15.0", *_third_party_requirements(skip={"torch", "triton"}))
    session.run("mypy")


@nox.session
def bench(session: nox.Session) -> None:
    """The main job: compile and benchmark the bundled model zoo on the CPU, printing the table."""
    _install_all_editable(session)
    session.run("python", "-m", "torchkiln", "bench", *session.posargs)
