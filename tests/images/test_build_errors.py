"""`make images` on bad input: no builder, a builder that cannot build here, no base image, a wheelhouse that
lacks a package. Each stops before building with a message saying what to install or which variable to set,
and no image is tagged."""

from __future__ import annotations

import os
import stat
from pathlib import Path

from image_harness import buildah, run_build

from shoal.operator.spec import DEFAULT_ENGINE_IMAGE, DEFAULT_GATEWAY_IMAGE

NEVER_BUILT = "localhost/shoal-never-built:test"


def path_without(tmp_path: Path, *hidden: str) -> str:
    """A PATH holding every program of the system's PATH except ``hidden``."""
    bin_dir = tmp_path / "bin"
    bin_dir.mkdir()
    for directory in os.environ["PATH"].split(os.pathsep):
        for program in Path(directory).glob("*") if Path(directory).is_dir() else ():
            target = bin_dir / program.name
            if program.name not in hidden and not target.exists() and os.access(program, os.X_OK):
                target.symlink_to(program)
    return str(bin_dir)


def test_tags_are_the_crd_and_chart_defaults() -> None:
    result = run_build("--tags")
    assert result.returncode == 0, result.stderr
    assert result.stdout.splitlines() == [f"operator {DEFAULT_GATEWAY_IMAGE}", f"engine {DEFAULT_ENGINE_IMAGE}"]


def test_no_builder_says_what_to_install(tmp_path: Path) -> None:
    result = run_build("operator", PATH=path_without(tmp_path, "docker", "podman", "buildah"))
    assert result.returncode != 0
    assert "no image builder works here" in result.stderr
    for builder in ("docker is not installed", "podman is not installed", "buildah is not installed"):
        assert builder in result.stderr
    assert "apt-get install buildah" in result.stderr


def test_builder_that_cannot_build_here_is_named(tmp_path: Path) -> None:
    # A stand-in docker CLI answering like one whose daemon is not running (no Docker engine can run here).
    fake = tmp_path / "fake-docker"
    fake.mkdir()
    (fake / "docker").write_text(
        "#!/bin/sh\necho 'Cannot connect to the Docker daemon at unix:///var/run/docker.sock."
        " Is the docker daemon running?' >&2\nexit 1\n"
    )
    (fake / "docker").chmod(stat.S_IRWXU)
    result = run_build("operator", BUILDER="docker", PATH=f"{fake}{os.pathsep}{os.environ['PATH']}")
    assert result.returncode != 0
    assert "BUILDER=docker: docker cannot build: Cannot connect to the Docker daemon" in result.stderr
    assert "unset BUILDER" in result.stderr


def test_no_base_image_and_no_bootstrap_tool() -> None:
    result = run_build("operator", BUILDER="buildah", MMDEBSTRAP="/nonexistent/mmdebstrap", OPERATOR_IMAGE=NEVER_BUILT)
    assert result.returncode != 0
    assert "no BASE_IMAGE" in result.stderr and "apt-get install mmdebstrap" in result.stderr
    assert "BASE_IMAGE=docker.io/library/python:3.11-slim-bookworm" in result.stderr
    assert buildah("inspect", "--type", "image", NEVER_BUILT, check=False).returncode != 0


def test_wheelhouse_missing_a_package_names_it(tmp_path: Path) -> None:
    wheelhouse = tmp_path / "wheels"
    wheelhouse.mkdir()
    result = run_build(
        "operator",
        BUILDER="buildah",
        BASE_IMAGE="localhost/shoal-base:any",
        WHEELHOUSE=str(wheelhouse),
        OPERATOR_IMAGE=NEVER_BUILT,
        timeout=300,
    )
    assert result.returncode != 0
    assert f"the wheelhouse {wheelhouse} lacks what the image needs" in result.stderr
    assert "No matching distribution found for pydantic" in result.stderr
    assert "WHEELHOUSE" in result.stderr and "STEP" not in result.stdout  # refused before any build step
    assert buildah("inspect", "--type", "image", NEVER_BUILT, check=False).returncode != 0
