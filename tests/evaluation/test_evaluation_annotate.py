"""Format conversion through the formats tree, and the Subtask/Trial annotator over a local HTTP endpoint."""

from __future__ import annotations

import json

import pytest
from canned_server import CannedServer  # tests/evaluation is on sys.path

from parallax import formats
from parallax.evaluation.annotate import annotate_trace, parse_label, stages, taxonomy
from parallax.evaluation.cli import main
from parallax.evaluation.teachers import HTTPTeacher
from parallax.trainingdata.convert import convert

R1 = ("Start. <Parallel><Path>Try 3. 3*7=21, no.</Path><Path>Try 7. 7*3=21 ok</Path></Parallel>"
      "<Summary>x=7 works</Summary>\nSo #### 7")
R1_SUB = ("<Parallel><Path>3*4=12</Path><Path>5*6=30</Path></Parallel><Summary>12 and 30</Summary>\n12+30=42 "
          "<Parallel><Path>Try 1</Path><Path>Try 2</Path></Parallel><Summary>2</Summary> #### 42")


def test_r1_to_parason_and_back_round_trips():
    p = convert(R1, "parallel_r1", "parason")
    tree = formats.parse(p, "parason")
    assert tree.ok and [b.kind for b in tree.tree.nodes[1].branches] == ["trial", "trial"]
    assert [b.outline for b in tree.tree.nodes[1].branches] == ["Try 3.", "Try 7."]
    assert p.endswith("</Parallel>x=7 works\n\nSo #### 7")  # the summary opens the main chain
    assert convert(p, "parason", "parallel_r1") == R1
    labelled = convert(R1, "parallel_r1", "parason", [[("subtask", "a"), ("subtask", "b")]])
    assert "<Subtask>a</Subtask><Subtask>b</Subtask>" in labelled
    # the work in branches is unchanged: critical path of the two renderings matches up to tags
    m1, m2 = formats.text_stats(R1, "parallel_r1"), formats.text_stats(p, "parason")
    assert m1["num_branches"] == m2["num_branches"] == 2


def test_conversion_errors():
    nested = ("<Parallel><Outlines><Trial>a</Trial><Trial>b</Trial></Outlines><Thread>x <Parallel><Outlines>"
              "<Subtask>c</Subtask><Subtask>d</Subtask></Outlines><Thread>1</Thread><Thread>2</Thread></Parallel>"
              "</Thread><Thread>y</Thread></Parallel> done")
    assert formats.parse(nested, "parason").ok
    with pytest.raises(ValueError, match="nested"):
        convert(nested, "parason", "parallel_r1")
    with pytest.raises(ValueError, match="not a valid"):
        convert("<Parallel><Path>a", "parallel_r1", "parason")
    with pytest.raises(ValueError, match="labels"):
        convert(R1, "parallel_r1", "parason", [[("trial", None)]])
    assert len(stages(nested, "parason")) == 2


@pytest.mark.parametrize("reply,want", [("Subtask", "subtask"), (" trial.", "trial"), ("Trials", "trial"),
                                        ("Not Subtask but Trial", "trial"), ("unsure", None)])
def test_parse_label(reply, want):
    assert parse_label(reply) == want


def test_annotator_over_http_and_taxonomy(tmp_path):
    # The canned annotator says Trial when branches "Try", else Subtask.
    with CannedServer(lambda prompt: "Trial" if "Try" in prompt else "Subtask") as srv:
        teacher = HTTPTeacher(srv.url, "annotator", chat=True, retries=0)
        labels = [annotate_trace(R1, "parallel_r1", teacher), annotate_trace(R1_SUB, "parallel_r1", teacher)]
        assert labels == [["trial"], ["subtask", "trial"]]
        tax = taxonomy(labels)
        assert (tax["stages"], tax["subtask"], tax["trial"]) == (3, 1, 2)
        assert tax["trial_share"] == pytest.approx(2 / 3)
        (tmp_path / "in.jsonl").write_text(json.dumps({"trace": R1_SUB}) + "\n")
        assert main(["annotate", str(tmp_path / "in.jsonl"), "--endpoint", srv.url, "--out",
                     str(tmp_path / "out.jsonl")]) == 0
    row = json.loads((tmp_path / "out.jsonl").read_text())
    assert row["stage_labels"] == ["subtask", "trial"]
    tree = formats.parse(row["parason_trace"], "parason").tree
    assert [b.branches[0].kind for b in tree.nodes if isinstance(b, formats.Block)] == ["subtask", "trial"]


def test_convert_cli(tmp_path, capsys):
    (tmp_path / "in.jsonl").write_text(json.dumps({"trace": R1}) + "\n" + json.dumps({"trace": "<Parallel>"}) + "\n")
    assert main(["convert", str(tmp_path / "in.jsonl"), "--src", "parallel_r1", "--dst", "parason", "--out",
                 str(tmp_path / "o.jsonl")]) == 0
    assert json.loads(capsys.readouterr().out.strip().splitlines()[-1]) == {"converted": 1, "skipped": 1}
    assert formats.parse(json.loads((tmp_path / "o.jsonl").read_text())["trace"], "parason").ok


def test_the_release_format_converts_its_conclusion_into_the_summary():
    release = ("Go <Parallel><Outlines><Outline>1: a</Outline><Outline>2: b</Outline></Outlines>"
               "<Thread>x</Thread><Thread>y</Thread><Conclusion>c</Conclusion></Parallel> #### 3")
    assert convert(release, "parason", "parallel_r1") == (
        "Go <Parallel><Path>x</Path><Path>y</Path></Parallel><Summary>c</Summary> #### 3")
