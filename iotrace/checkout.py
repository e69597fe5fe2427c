"""Which iotrace source ran: the git commit of the checkout it was imported from, and whether it had changes.

Run manifests, self-check results and published notes all record it, so a figure can be traced to the code.
"""

from __future__ import annotations

import shutil
import subprocess
from pathlib import Path
from typing import Any

__all__ = ["git_info", "short_commit"]


def git_info(timeout_s: float = 30) -> dict[str, Any]:
    """``{"commit", "dirty", "note"}``: the commit of the iotrace source that ran (None with a ``note`` saying why
    when it is not a git checkout, e.g. an installed package, or git is missing)."""
    import iotrace

    source = Path(iotrace.__file__).resolve().parent
    git = shutil.which("git")
    if git is None:
        return {"commit": None, "dirty": None, "note": "git is not installed: commit unknown"}
    try:
        top = subprocess.run([git, "-C", str(source), "rev-parse", "--show-toplevel"], capture_output=True,
                             text=True, timeout=timeout_s)
        # An installed iotrace inside another project's tree (its .venv) would otherwise report that project's commit.
        if top.returncode != 0 or Path(top.stdout.strip()).resolve() != source.parent:
            return {"commit": None, "dirty": None,
                    "note": f"{source} is not in a git checkout of iotrace (an installed package): commit unknown"}
        head = subprocess.run([git, "-C", str(source), "rev-parse", "HEAD"], capture_output=True, text=True,
                              timeout=timeout_s)
        status = subprocess.run([git, "-C", str(source), "status", "--porcelain", "--untracked-files=no"],
                                capture_output=True, text=True, timeout=timeout_s)
    except (OSError, subprocess.TimeoutExpired) as exc:
        return {"commit": None, "dirty": None, "note": f"git failed: {exc}"}
    return {"commit": head.stdout.strip(), "dirty": bool(status.stdout.strip()), "note": None}


def short_commit() -> str:
    """The commit's first 7 hex digits, or "unknown"."""
    commit = git_info(timeout_s=10)["commit"]
    return commit[:7] if commit else "unknown"
