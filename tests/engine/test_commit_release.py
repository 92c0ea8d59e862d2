"""worktree.commit_release streams a release's verified files into git: the commit is the one that unpacking them
and `git add -A && git commit -m` made before (the rebase repositories, worktrees and wheel checkouts are built
with it), and a file that differs from the wheel's RECORD stops it as unpack stops."""
from __future__ import annotations

import shutil
import zipfile

import pytest

from patchkit import PatchkitError
from patchkit.gitcmd import git, init_repo
from patchkit.pristine import Pristine
from patchkit.worktree import commit_release
from tests.fault_fixtures import PACKAGE, make_wheel

FILES = {f"{PACKAGE}/__init__.py": "", f"{PACKAGE}/core.py": "x = 1\n", f"{PACKAGE}/sub/deep/a b.py": "y = 2\n",
         f'{PACKAGE}/odd "quoted" name.txt': "z\n", f"{PACKAGE}/data.bin": bytes(range(256)) * 3,
         f"{PACKAGE}/empty.txt": b""}
MESSAGE = "pristine 1.0\n\nBody line,  \nwith a trailing blank line.\n\n"


def unpacked_and_added(repo, pristine: Pristine, root: str, message: str, prefix: str = "") -> str:
    """The commit as it was made before commit_release: the files unpacked (less the dist-info), `git add -A`,
    `git commit -m`."""
    init_repo(repo)
    where = repo / prefix if prefix else repo
    pristine.unpack(where, root=root)
    shutil.rmtree(where / pristine.dist_info())
    git(repo, "add", "-A")
    git(repo, "commit", "-q", "--allow-empty", "-m", message)
    return git(repo, "rev-parse", "HEAD").stdout.strip()


@pytest.mark.parametrize("prefix", ["", "python"])
def test_the_commit_is_the_one_unpack_and_add_made(tmp_path, prefix):
    pristine = Pristine(make_wheel(tmp_path / "w", "1.0", FILES))
    before = unpacked_and_added(tmp_path / "before", pristine, PACKAGE, MESSAGE, prefix)
    init_repo(tmp_path / "after")
    after = commit_release(tmp_path / "after", pristine, PACKAGE, MESSAGE, prefix=prefix)
    assert after == before
    git(tmp_path / "after", "reset", "-q", "--hard")
    for name, data in FILES.items():
        path = tmp_path / "after" / prefix / name
        assert path.read_bytes() == (data.encode() if isinstance(data, str) else data), name


def test_a_second_release_on_a_parent_holds_only_its_own_files(tmp_path):
    old = Pristine(make_wheel(tmp_path / "w1", "1.0", FILES))
    new_files = {f"{PACKAGE}/__init__.py": "", f"{PACKAGE}/moved/core.py": "x = 1\n"}
    new = Pristine(make_wheel(tmp_path / "w2", "1.1", new_files))
    repo = init_repo(tmp_path / "repo")
    base = commit_release(repo, old, PACKAGE, "pristine 1.0")
    head = commit_release(repo, new, PACKAGE, "pristine 1.1", parent=base)
    assert git(repo, "rev-parse", f"{head}^").stdout.strip() == base
    assert sorted(git(repo, "ls-tree", "-r", "--name-only", head).stdout.split("\n")[:-1]) == sorted(new_files)
    renames = git(repo, "diff", "-M", "--name-status", base, head).stdout
    assert f"R100\t{PACKAGE}/core.py\t{PACKAGE}/moved/core.py" in renames, renames


def test_a_file_that_differs_from_its_record_stops_it_and_commits_nothing(tmp_path):
    bad = f"{PACKAGE}/core.py"
    wheel = make_wheel(tmp_path / "w", "1.0", FILES, record_override={bad: f"{bad},sha256=AAAA,6"})
    repo = init_repo(tmp_path / "repo")
    with pytest.raises(PatchkitError, match=r"core\.py: expected sha256=AAAA \(6 bytes\) as in its RECORD"):
        commit_release(repo, Pristine(wheel), PACKAGE, "pristine 1.0")
    assert git(repo, "rev-parse", "--verify", "-q", "refs/heads/main", check=False).returncode != 0


def test_a_file_its_record_lists_but_the_wheel_lacks_stops_it(tmp_path):
    wheel = make_wheel(tmp_path / "w", "1.0", FILES)
    # the same wheel less one file its RECORD lists
    gone = f"{PACKAGE}/core.py"
    thin = tmp_path / "thin.whl"
    with zipfile.ZipFile(wheel) as src, zipfile.ZipFile(thin, "w") as dst:
        for info in src.infolist():
            if info.filename != gone:
                dst.writestr(info, src.read(info.filename))
    repo = init_repo(tmp_path / "repo")
    with pytest.raises(PatchkitError, match=f"RECORD lists {gone}, found no such file"):
        commit_release(repo, Pristine(thin), PACKAGE, "pristine 1.0")
    assert git(repo, "rev-parse", "--verify", "-q", "refs/heads/main", check=False).returncode != 0


def test_the_pinned_release_commits_as_unpack_and_add_did(tmp_path):
    """On the default line's real sglang wheel (about 12,000 files): the same tree and commit."""
    from tests.conftest import pristine_wheel

    pristine = pristine_wheel("sglang", "0.5.23")
    before = unpacked_and_added(tmp_path / "before", pristine, "sglang", "pristine 0.5.23")
    init_repo(tmp_path / "after")
    assert commit_release(tmp_path / "after", pristine, "sglang", "pristine 0.5.23") == before
