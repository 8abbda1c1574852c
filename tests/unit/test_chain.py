"""The hash chain: any changed byte, dropped, inserted or reordered line is found and named."""

import json
import time

import pytest

from assure.core import chain
from assure.core.chain import GENESIS, ChainError, ChainWriter, canonical, seal, verify_chain


@pytest.fixture
def journal(tmp_path):
    path = tmp_path / "journal.jsonl"
    writer = ChainWriter(path, base={"run_id": "r1", "actor": "gateway"})
    for i in range(5):
        writer.append("tool_call", tool="fs.write", n=i, text="é\n\x1b")
    writer.close()
    return path


def lines(path):
    return path.read_text().splitlines()


def test_a_clean_chain_verifies(journal):
    records = verify_chain(journal)
    assert [r["seq"] for r in records] == [1, 2, 3, 4, 5]
    assert records[0]["prev"] == GENESIS
    assert all(r["run_id"] == "r1" and r["actor"] == "gateway" for r in records)
    assert records[2]["text"] == "é\n\x1b"


def test_one_changed_byte_is_found(journal):
    text = lines(journal)
    text[2] = text[2].replace('"n":2', '"n":7')
    with pytest.raises(ChainError, match="hash does not match") as info:
        verify_chain(text)
    assert info.value.line == 3


def test_a_dropped_line_is_found(journal):
    text = lines(journal)
    del text[1]
    with pytest.raises(ChainError, match="expected seq 2") as info:
        verify_chain(text)
    assert info.value.line == 2


def test_reordered_lines_are_found(journal):
    text = lines(journal)
    text[1], text[2] = text[2], text[1]
    with pytest.raises(ChainError) as info:
        verify_chain(text)
    assert info.value.line == 2


def test_a_rehashed_but_relinked_line_is_found(journal):
    """Recomputing one line's hash after editing it still breaks the next line's prev."""
    text = lines(journal)
    record = json.loads(text[1])
    record["n"] = 99
    from assure.core.chain import seal

    text[1] = canonical(seal(record)).decode()
    with pytest.raises(ChainError, match="prev does not match") as info:
        verify_chain(text)
    assert info.value.line == 3


def test_non_canonical_whitespace_is_found(journal):
    text = lines(journal)
    text[0] = text[0].replace(",", ", ", 1)
    with pytest.raises(ChainError, match="canonical") as info:
        verify_chain(text)
    assert info.value.line == 1


def test_writer_continues_an_existing_chain(journal):
    writer = ChainWriter(journal, base={"run_id": "r1"})
    record = writer.append("gateway_stopped")
    writer.close()
    assert record["seq"] == 6
    assert verify_chain(journal)[-1]["hash"] == record["hash"]


def test_writer_refuses_to_continue_a_broken_chain(journal):
    text = lines(journal)
    journal.write_text("\n".join(text[:2] + text[3:]) + "\n")
    with pytest.raises(ChainError):
        ChainWriter(journal)


@pytest.mark.parametrize(
    "fields",
    [
        {},  # only the writer's own keys
        {"a": 1, "zz": [1, {"b": None}]},  # keys on both sides of "hash"
        {"hash": "forged", "h": 1, "hasi": 2, "has": 3},  # around "hash", and "hash" dropped
        {"é": "ü", "\x01": '"\\', "Z": {"é": 1.5}},  # escapes sort apart from their JSON text
    ],
)
def test_each_line_is_the_canonical_json_of_its_sealed_record(tmp_path, fields):
    """ChainWriter.line encodes a record once, in two halves around "hash": the same bytes as
    canonical(seal(record)), which is what verify_chain recomputes."""
    writer = ChainWriter(tmp_path / "j.jsonl", base={"run_id": "r", "attempt": 1})
    record, line = writer.line("e", **fields)
    expected = seal({k: v for k, v in record.items() if k != "hash"})
    assert record == expected and line == canonical(expected).decode() + "\n"
    assert record["hash"] != "forged"
    writer.write(record, line)
    writer.close()
    assert verify_chain(tmp_path / "j.jsonl")[-1] == record


@pytest.mark.parametrize(
    "value",
    [
        {"b": 1, "a": [1.5, None, True, False, -0.0, 1e300, 2**70], "c": {"z": "\u2028", "y": ""}},
        {"é": "ü\x00\x7f", "\x01": '"\\/', "Z": {"é": 1.5}, "1": [[], {}]},
        "text",
        3,
        [0.1, 1 / 3],
    ],
)
def test_canonical_is_the_json_dumps_encoding(value):
    """canonical() keeps one C encoder instead of json.dumps building one per call: the bytes
    are json.dumps's, so journals written before and after verify alike."""
    reference = json.dumps(
        value, sort_keys=True, separators=(",", ":"), ensure_ascii=True, allow_nan=False
    ).encode()
    assert canonical(value) == reference


@pytest.mark.parametrize("bad", [float("nan"), {"a": float("inf")}, {"a": object()}, {(1,): 2}])
def test_canonical_refuses_what_json_dumps_refuses(bad):
    with pytest.raises((ValueError, TypeError)):
        canonical(bad)


def test_utc_now_is_the_wall_clock_in_microseconds(monkeypatch):
    """The whole second's text is cached; the line still shows the clock of its own call."""
    for t in (1_700_000_000.25, 1_700_000_000.999999, 1_700_000_001.000001, 1_700_000_000.5):
        monkeypatch.setattr(chain.time, "time", lambda t=t: t)
        stamp = time.strftime("%Y-%m-%dT%H:%M:%S", time.gmtime(t)) + f".{int(t % 1 * 1e6):06d}Z"
        assert chain.utc_now() == stamp


PH = chain._PLACEHOLDER


@pytest.mark.parametrize(
    "body",
    [
        {},  # "hash" the only member
        {"a": 1},  # "hash" last
        {"z": 1},  # "hash" first
        {"a": PH},  # the placeholder as an agent's string
        {"a": {"hash": PH}, "z": 2},  # a nested "hash" equal to the placeholder
        {PH: 1},  # the placeholder as a key
        {"z": f'"hash":"{PH}"'},  # the whole member, quoted, as a string
        {"a": f',"hash":"{PH}",', "hasg": PH + PH},
        {"a": "x" + PH + "x", "hash2": [PH]},  # inside longer strings, in a list
        {"hash": PH, "z": 0},  # a "hash" field is dropped, as seal drops it
        {"hasg": 1, "hasi": {"hash": "h"}, "é": "\u2028" + PH[:-1]},
    ],
)
def test_the_one_pass_line_is_the_two_pass_line_on_hostile_input(body):
    """The line is encoded once around a placeholder hash; whatever an agent puts in a field
    (the placeholder itself, a nested "hash"), the line and hash are those of encoding it
    twice (`canonical(seal(...))`, what the verifier recomputes), or the writer falls back."""
    covered = {k: v for k, v in body.items() if k != "hash"}
    expected = seal(covered)
    digest, line = chain._sealed_line(covered)
    assert digest == expected["hash"]
    assert line == canonical(expected).decode() + "\n"
    assert verify_chain([canonical(seal({**covered, "seq": 1, "prev": GENESIS})).decode()])


def test_agent_strings_holding_the_placeholder_make_a_verifiable_journal(tmp_path):
    writer = ChainWriter(tmp_path / "j.jsonl", base={"run_id": "r"})
    writer.append("tool_call", path=PH, args={"hash": PH})
    writer.append("tool_call", reason=f'"hash":"{PH}"')
    writer.append("tool_call", n=1)
    writer.close()
    records = verify_chain(tmp_path / "j.jsonl")
    assert [r["seq"] for r in records] == [1, 2, 3]
    assert records[0]["path"] == PH and records[0]["args"] == {"hash": PH}
    assert all(PH not in r["hash"] for r in records)


def test_each_line_is_one_write_to_the_os(tmp_path):
    """Unbuffered: a line is in the file once append returns, before close (a killed writer
    loses nothing it appended)."""
    path = tmp_path / "j.jsonl"
    writer = ChainWriter(path)
    writer.append("a")
    first = path.read_bytes()
    writer.append("b")
    assert len(verify_chain([first.decode().rstrip("\n")])) == 1
    assert writer.size == len(path.read_bytes()) and path.read_bytes().startswith(first)
    writer.close()
    writer.close()  # twice is harmless
    with pytest.raises(ValueError):
        writer.append("c")


def test_a_writer_dropped_unclosed_closes_its_descriptor(tmp_path):
    import gc
    import os

    writer = ChainWriter(tmp_path / "j.jsonl")
    writer.append("a")
    fd = writer._fd
    del writer
    gc.collect()
    with pytest.raises(OSError):
        os.fstat(fd)
