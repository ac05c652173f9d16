"""The platform's data dir keeps its keys to their owner and out of git: made ``0700`` with a
``.gitignore`` of ``*`` inside, key files ``0600`` from their creation, written whole."""

from __future__ import annotations

import stat
import subprocess
from pathlib import Path

from x402mw.platform.keys import git_work_tree, load_or_create_key, parse_private_key, prepare_data_dir

KEY_FILES = ("relayer.key", "receipt.key", "treasury.key", "deposit.seed", "sealing.key")


def _mode(path: Path) -> int:
    return stat.S_IMODE(path.stat().st_mode)


def test_keys_are_created_owner_only_in_a_data_dir_git_ignores(tmp_path: Path) -> None:
    repository = tmp_path / "repo"
    repository.mkdir()
    subprocess.run(["git", "init", "-q", str(repository)], check=True)
    data_dir = repository / ".x402mw"
    keys = {name: load_or_create_key(None, data_dir / name) for name in KEY_FILES}
    assert len(set(keys.values())) == len(KEY_FILES)  # each its own
    assert _mode(data_dir) == 0o700
    assert (data_dir / ".gitignore").read_text().splitlines()[-1] == "*"
    for name in KEY_FILES:
        assert _mode(data_dir / name) == 0o600, name
        assert load_or_create_key(None, data_dir / name) == keys[name]  # read back, not made again
    assert sorted(p.name for p in data_dir.iterdir()) == sorted([*KEY_FILES, ".gitignore"])  # no partial file left
    # what `git add -A` would take from the work tree: nothing of the data dir
    subprocess.run(["git", "-C", str(repository), "add", "-A"], check=True)
    listed = subprocess.run(["git", "-C", str(repository), "ls-files"], check=True, capture_output=True, text=True)
    assert listed.stdout == ""
    assert git_work_tree(data_dir) == repository.resolve()
    assert git_work_tree(tmp_path) is None


def test_an_existing_data_dir_and_a_given_key_are_left_alone(tmp_path: Path) -> None:
    tmp_path.joinpath("relayer.key").write_text("0x" + "11" * 32)
    prepare_data_dir(tmp_path)
    assert not (tmp_path / ".gitignore").exists()  # the operator's own directory: not rewritten
    assert load_or_create_key(None, tmp_path / "relayer.key") == bytes.fromhex("11" * 32)
    given = "0x" + "22" * 32
    assert load_or_create_key(given, tmp_path / "missing" / "receipt.key") == parse_private_key(given)
    assert not (tmp_path / "missing").exists()
