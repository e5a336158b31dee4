"""`python -m musique_models.export`: the folder's files and model card, a refused non-empty output, nothing
half-written, and the Hub upload up to the API call (the network is not reachable here: `HfApi` is replaced at its
boundary). That an export loads back to the run's exact predictions is checked for every registered system by the
contract test (tests/cli/test_score_run.py, `check_the_python_api`)."""

from __future__ import annotations

import json
from pathlib import Path

import pytest
import yaml
from safetensors.torch import load_file

from musique_models.export import export_run
from musique_models.export.__main__ import main as export_main
from musique_models.run_files import EXPORT_FILE
from tests.cli.test_score_run import full_run  # noqa: F401 (the module's shared tiny MuSiQue-Full SA run)


@pytest.mark.slow
def test_the_export_holds_every_stage_and_a_hub_model_card(full_run: Path, tmp_path: Path) -> None:  # noqa: F811
    out = export_run(full_run, tmp_path / "export")
    manifest = json.loads((out / EXPORT_FILE).read_text())
    assert sorted(manifest["stages"]) == ["answerer", "selector"]
    for stage in ("selector", "answerer"):
        weights = load_file(out / stage / "model.safetensors")
        assert weights and all(not key.startswith("_") for key in weights)
        assert (out / stage / "tokenizer.json").exists()
        module = json.loads((out / stage / "musique_models_module.json").read_text())
        assert module["hyper_parameters"]["backbone"]["__dataclass__"].endswith("BackboneSpec")
    for name in ("config.yaml", "provenance.json", "metrics.json", "status.json"):
        assert (out / name).exists(), name
    card = (out / "README.md").read_text()
    front = yaml.safe_load(card.split("---\n")[1])
    metrics = json.loads((full_run / "metrics.json").read_text())
    (result,) = front["model-index"][0]["results"]
    assert front["library_name"] == "musique-models" and front["license"] == "apache-2.0"
    assert result["dataset"]["split"] == "dev" and front["datasets"] == ["bdsaglam/musique"]
    values = {metric["name"]: metric["value"] for metric in result["metrics"]}
    assert values["Answer F1 (An)"] == round(100 * metrics["answer_f1"], 2)
    assert values["An+Sf F1"] == round(100 * metrics["group_answer_sufficiency_f1"], 2)
    assert "base_model" not in front  # the tiny backbone is random: no pretrained model to name
    for heading in ("## Intended use", "## Training data and settings", "## Evaluation", "## How to load it"):
        assert heading in card
    assert "a pipeline check, not a result" in card  # trained on the shipped sample, and it says so


@pytest.mark.slow
def test_a_non_empty_output_is_refused_and_nothing_is_half_written(
    full_run: Path,  # noqa: F811
    tmp_path: Path,
    capsys: pytest.CaptureFixture,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    taken = tmp_path / "taken"
    taken.mkdir()
    (taken / "mine.txt").write_text("a user's file\n")
    with pytest.raises(SystemExit) as exited:
        export_main([str(full_run), "--out", str(taken)])
    assert exited.value.code == 2 and "the folder is not empty" in capsys.readouterr().err
    assert sorted(path.name for path in taken.iterdir()) == ["mine.txt"]
    # a failure while writing leaves no `out`, only the partial folder beside it (removed by the next attempt)
    import musique_models.export as export

    monkeypatch.setattr(export, "model_card", lambda *args: (_ for _ in ()).throw(RuntimeError("disk full")))
    with pytest.raises(RuntimeError, match="disk full"):
        export_run(full_run, tmp_path / "fresh")
    assert sorted(path.name for path in tmp_path.iterdir()) == ["taken"]  # no `fresh`, no partial folder


@pytest.mark.slow
def test_push_to_hub_makes_the_repository_and_uploads_the_folder(
    full_run: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
    capsys: pytest.CaptureFixture,
) -> None:
    calls = []

    class FakeApi:  # huggingface_hub.HfApi at its boundary: no network here
        def create_repo(self, repo_id: str, **kwargs: object) -> str:
            calls.append(("create_repo", repo_id, kwargs))
            return f"https://huggingface.co/{repo_id}"

        def upload_folder(self, **kwargs: object) -> None:
            calls.append(
                ("upload_folder", kwargs["repo_id"], sorted(p.name for p in Path(kwargs["folder_path"]).iterdir()))
            )

    monkeypatch.setattr("huggingface_hub.HfApi", FakeApi)
    assert export_main([str(full_run), "--out", str(tmp_path / "out"), "--push-to-hub", "me/sa-tiny", "--private"]) == 0
    assert calls[0] == ("create_repo", "me/sa-tiny", {"repo_type": "model", "private": True, "exist_ok": True})
    assert calls[1][:2] == ("upload_folder", "me/sa-tiny") and "README.md" in calls[1][2] and "answerer" in calls[1][2]
    assert "pushed to https://huggingface.co/me/sa-tiny" in capsys.readouterr().out


@pytest.mark.slow
def test_an_export_that_names_another_class_or_a_path_outside_is_refused(full_run: Path, tmp_path: Path) -> None:  # noqa: F811
    from musique_models.runs.api import ApiInputError, load_run

    out = export_run(full_run, tmp_path / "export")
    module = out / "selector" / "musique_models_module.json"
    saved = module.read_text()
    hostile = {"__dataclass__": "musique_models.recipes.build.instantiate_recipe", "fields": {"cfg": {}}}
    module.write_text(json.dumps({"hyper_parameters": {"backbone": hostile}}))
    with pytest.raises(ApiInputError, match="an export may name only musique_models.models.backbone.BackboneSpec"):
        load_run(out)
    module.write_text(saved)
    manifest = json.loads((out / EXPORT_FILE).read_text())
    manifest["stages"]["selector"]["weights"] = "../../elsewhere.safetensors"
    (out / EXPORT_FILE).write_text(json.dumps(manifest))
    with pytest.raises(ApiInputError, match="files outside the export"):
        load_run(out)
    with pytest.raises(SystemExit):  # an export is not exported again
        export_main([str(out), "--out", str(tmp_path / "again")])


@pytest.mark.slow
def test_an_encoder_stage_loads_with_stock_transformers(full_run: Path, tmp_path: Path) -> None:  # noqa: F811
    import torch
    from transformers import AutoModel, AutoTokenizer

    out = export_run(full_run, tmp_path / "export")
    manifest = json.loads((out / EXPORT_FILE).read_text())
    assert manifest["stages"]["selector"]["encoder"] == "selector/encoder"
    encoder = AutoModel.from_pretrained(out / "selector" / "encoder").eval()
    tokenizer = AutoTokenizer.from_pretrained(out / "selector" / "encoder")
    weights = load_file(out / "selector" / "model.safetensors")
    state = encoder.state_dict()
    for key, tensor in weights.items():  # every encoder weight of the stage, as transformers reads it
        if key.startswith("encoder."):
            assert torch.equal(state[key.removeprefix("encoder.")], tensor), key
    with torch.no_grad():
        hidden = encoder(**tokenizer("Who founded Rome?", return_tensors="pt")).last_hidden_state
    assert hidden.shape[-1] == encoder.config.hidden_size
