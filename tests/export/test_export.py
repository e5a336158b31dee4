"""`python -m musique_models.export`: the folder's files and model card, a refused non-empty output, nothing
half-written, and the Hub upload up to the API call (the network is not reachable here: `HfApi` is replaced at its
boundary). That an export loads back to the run's exact predictions is checked for every registered system by the
contract test (tests/cli/test_score_run.py, `check_the_python_api`)."""

from __future__ import annotations

import json
import shutil
from collections.abc import Callable
from pathlib import Path

import pytest
import torch
import yaml
from omegaconf import OmegaConf
from safetensors.torch import load_file

from musique_models.export import ExportError, export_run
from musique_models.export.__main__ import main as export_main
from musique_models.run_files import EXPORT_FILE, STAGE_FILE
from musique_models.runs.api import ApiInputError, load_run
from musique_models.runs.exported import file_checksums
from tests.cli.test_score_run import (  # the shared tiny MuSiQue-Full SA run
    QUESTIONS,
    full_run,  # noqa: F401
    gold_subset,
    reading_only_the_export,
    trained_run,
)
from tests.conftest import SAMPLES


@pytest.mark.slow
def test_the_export_holds_every_stage_and_a_hub_model_card(full_run: Path, tmp_path: Path) -> None:  # noqa: F811
    out = export_run(full_run, tmp_path / "export")
    manifest = json.loads((out / EXPORT_FILE).read_text())
    assert sorted(manifest["stages"]) == ["answerer", "selector"]
    for stage in ("selector", "answerer"):
        heads = load_file(out / stage / "model.safetensors")
        encoder = load_file(out / stage / "backbone" / "model.safetensors")
        # each weight once: the encoder's in the backbone folder, the heads beside it; together the module's
        trained = torch.load(best_checkpoint(full_run, stage), map_location="cpu", weights_only=False)["state_dict"]
        assert heads and not any(key.startswith("encoder.") for key in heads)
        assert sorted([*heads, *(f"encoder.{key}" for key in encoder)]) == sorted(trained)
        assert (out / stage / "backbone" / "tokenizer.json").exists()
        assert (out / stage / "backbone" / "config.json").exists()
        module = json.loads((out / stage / "musique_models_module.json").read_text())
        assert module["hyper_parameters"]["backbone"]["__dataclass__"].endswith("BackboneSpec")
    assert manifest["reused"] == {}
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
    assert (
        'selector = AutoModel.from_pretrained("path/to/this/folder/selector/backbone", add_pooling_layer=False)' in card
    )
    assert "Trained with `trainer.fast_dev_run`" in card and "training questions capped at 6" in card


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


def restorer(out: Path) -> Callable[[], None]:
    """A function that puts every file of the export in `out` back as it is now (folders removed since included)."""
    original = {path: path.read_bytes() for path in out.rglob("*") if path.is_file()}

    def restore() -> None:
        for path, content in original.items():
            path.parent.mkdir(parents=True, exist_ok=True)
            path.write_bytes(content)

    return restore


def crafted(out: Path, change: dict | None = None) -> None:
    """Edit an export's `export.json` (`change`: keys to set) and recompute its checksums, as someone crafting an
    export would: what is refused then is refused for what it asks, not for a checksum."""
    manifest = json.loads((out / EXPORT_FILE).read_text())
    manifest.update(change or {})
    manifest["files"] = file_checksums(out)
    (out / EXPORT_FILE).write_text(json.dumps(manifest))


@pytest.mark.slow
def test_a_crafted_export_runs_no_code_and_reads_nothing_outside(full_run: Path, tmp_path: Path) -> None:  # noqa: F811
    """An export from elsewhere, checksums and all: a module file naming another class, a path outside, a pickle, a
    config naming a class no shipped config names, model code (`trust_remote_code`) or a checkpoint outside are each
    refused in one line before anything is built; `trust_code=True` lifts the config check."""
    out = export_run(full_run, tmp_path / "export")
    restore = restorer(out)

    module = out / "selector" / "musique_models_module.json"
    hostile = {"__dataclass__": "musique_models.recipes.build.instantiate_recipe", "fields": {"cfg": {}}}
    module.write_text(json.dumps({"hyper_parameters": {"backbone": hostile}}))
    crafted(out)
    with pytest.raises(ApiInputError, match="an export may name only musique_models.models.backbone.BackboneSpec"):
        load_run(out)
    restore()
    stages = json.loads((out / EXPORT_FILE).read_text())["stages"]
    crafted(out, {"stages": {**stages, "selector": {**stages["selector"], "weights": "../../elsewhere.safetensors"}}})
    with pytest.raises(ApiInputError, match="outside the export"):
        load_run(out)
    restore()
    # a network is read from safetensors only: a pickle beside it (which transformers would unpickle) is refused
    (out / "selector" / "backbone" / "model.safetensors").rename(out / "selector" / "backbone" / "pytorch_model.bin")
    crafted(out)
    with pytest.raises(ApiInputError, match="read from safetensors only; found pytorch_model.bin"):
        load_run(out)
    (out / "selector" / "backbone" / "pytorch_model.bin").rename(out / "selector" / "backbone" / "model.safetensors")
    restore()
    # code a network's config would have transformers look for, a link to a file outside, a file added to a stage
    config_json = out / "selector" / "backbone" / "config.json"
    config_json.write_text(json.dumps({**json.loads(config_json.read_text()), "auto_map": {"AutoModel": "x.Y"}}))
    crafted(out)
    with pytest.raises(ApiInputError, match="names code of its own"):
        load_run(out)
    restore()
    (out / "selector" / "backbone" / "vocab.txt").symlink_to(tmp_path / "outside.txt")
    crafted(out)
    with pytest.raises(ApiInputError, match="vocab.txt: a link"):
        load_run(out)
    (out / "selector" / "backbone" / "vocab.txt").unlink()
    (out / "selector" / "backbone" / "special_tokens_map.json").write_text("{}")
    with pytest.raises(ApiInputError, match="special_tokens_map.json: not a file the export wrote"):
        load_run(out)
    (out / "selector" / "backbone" / "special_tokens_map.json").unlink()
    restore()

    config = yaml.safe_load((out / "config.yaml").read_text())
    opener = "${oc.create:{_target_: builtins.open, _args_: ['" + str(tmp_path / "x") + "', 'w']}}"
    for key, value, refusal in [
        ("extra", {"_target_": "logging.FileHandler", "filename": str(tmp_path / "x")}, "names logging.FileHandler"),
        ("model.answerer.backbone.pooling", opener, "holds an interpolation"),  # a resolver builds what it says
        ("model.answerer.backbone.tokenizer_from", {"_target_": "optuna.samplers.TPESampler"}, "may name only"),
        ("model.answerer.backbone.config_overrides", {"_args_": [1]}, "a key of instantiate's"),
        ("model.selector.backbone.config_overrides", {"trust_remote_code": True}, "would run a model's own code"),
        ("model.selector_checkpoint", str(tmp_path / "other.ckpt"), "a checkpoint outside the export"),
    ]:
        changed = json.loads(json.dumps(config))
        node = changed
        *parents, last = key.split(".")
        for name in parents:
            node = node.setdefault(name, {})
        node[last] = value
        (out / "config.yaml").write_text(yaml.safe_dump(changed))
        crafted(out)
        with pytest.raises(ApiInputError, match=refusal):
            load_run(out)
        assert not (tmp_path / "x").exists()  # nothing was built
    restore()
    # a reused stage the export does not hold, so that the config's checkpoint would be read from outside
    crafted(out, {"reused": {"model.selector_checkpoint": "ghost"}})
    with pytest.raises(ApiInputError, match="a model.\\*_checkpoint key naming a stage of the export"):
        load_run(out)
    restore()
    # a stage made "whole" whose backbone would be converted into a folder outside (which writes it), or read from
    # a saved folder outside: refused before anything is read or written
    victim = tmp_path / "victim"
    victim.mkdir()
    (victim / "data.txt").write_text("mine\n")
    module_file = out / "selector" / "musique_models_module.json"
    module = json.loads(module_file.read_text())
    minilm = module["hyper_parameters"]["backbone"]["fields"]["tokenizer_from"]
    for fields, refusal in [
        ({"source": "converted", "path": str(victim), "convert_from": minilm}, "would write a folder"),
        ({"source": "saved", "path": str(victim)}, "names a saved folder of its own"),
    ]:
        hostile = json.loads(json.dumps(module))
        hostile["hyper_parameters"]["backbone"]["fields"].update(fields)
        module_file.write_text(json.dumps(hostile))
        manifest = json.loads((out / EXPORT_FILE).read_text())
        manifest["stages"]["selector"] = {
            "weights": "selector/model.safetensors",
            "module": "selector/musique_models_module.json",
            "whole": True,
        }
        shutil.rmtree(out / "selector" / "backbone")
        crafted(out, {"stages": manifest["stages"]})
        with pytest.raises(ApiInputError, match=refusal):
            load_run(out)
        assert [path.name for path in victim.iterdir()] == ["data.txt"]
        restore()
    # a config naming a harmless class of the user's own loads when the user says they trust it
    (out / "config.yaml").write_text(yaml.safe_dump({**config, "extra": {"_target_": "collections.OrderedDict"}}))
    crafted(out)
    with pytest.raises(ApiInputError, match="trust_code=True"):
        load_run(out)
    assert load_run(out, trust_code=True).predict("Who?", ["A paragraph."]).id == "q0"
    restore()
    with pytest.raises(SystemExit):  # an export is not exported again
        export_main([str(out), "--out", str(tmp_path / "again")])


@pytest.mark.slow
def test_a_damaged_export_is_one_line_naming_what_is_wrong(full_run: Path, tmp_path: Path) -> None:  # noqa: F811
    """A file changed, truncated or missing since the export (its checksum in export.json), an export.json that is
    not JSON or not an export's, a stage left out of it, or no export.json at all: one `ApiInputError` each."""
    out = export_run(full_run, tmp_path / "export")
    restore = restorer(out)

    heads = out / "answerer" / "model.safetensors"
    flipped = bytearray(heads.read_bytes())
    flipped[-1] ^= 1
    heads.write_bytes(bytes(flipped))
    with pytest.raises(ApiInputError, match=r"answerer/model.safetensors: not the file the export wrote"):
        load_run(out)
    restore()
    config_json = out / "selector" / "backbone" / "config.json"
    config_json.write_text(config_json.read_text()[:40])  # truncated
    with pytest.raises(ApiInputError, match="selector/backbone/config.json: not the file the export wrote"):
        load_run(out)
    restore()
    (out / "answerer" / "backbone" / "tokenizer.json").unlink()
    with pytest.raises(ApiInputError, match="answerer/backbone/tokenizer.json is missing"):
        load_run(out)
    restore()
    (out / EXPORT_FILE).write_text("{stages: ")
    with pytest.raises(ApiInputError, match="export.json: not readable as JSON"):
        load_run(out)
    (out / EXPORT_FILE).write_text(json.dumps({"stages": []}))
    with pytest.raises(ApiInputError, match="`stages` must be an object of stages"):
        load_run(out)
    restore()
    manifest = json.loads((out / EXPORT_FILE).read_text())
    del manifest["stages"]["selector"]
    (out / EXPORT_FILE).write_text(json.dumps(manifest))
    with pytest.raises(
        ApiInputError, match=r"an incomplete export: model=select_answer needs a stage .*lists: answerer"
    ):
        load_run(out)
    (out / EXPORT_FILE).unlink()
    with pytest.raises(ApiInputError, match="an export without its export.json"):
        load_run(out)
    restore()
    assert load_run(out).predict("Who?", ["A paragraph."]).answerable in (True, False)  # whole again: it loads


@pytest.mark.slow
def test_an_encoder_stage_loads_with_stock_transformers(full_run: Path, tmp_path: Path) -> None:  # noqa: F811
    from transformers import AutoModel, AutoTokenizer

    out = export_run(full_run, tmp_path / "export")
    manifest = json.loads((out / EXPORT_FILE).read_text())
    assert manifest["stages"]["selector"]["backbone"]["folder"] == "selector/backbone"
    encoder = AutoModel.from_pretrained(out / "selector" / "backbone", add_pooling_layer=False).eval()
    tokenizer = AutoTokenizer.from_pretrained(out / "selector" / "backbone")
    trained = torch.load(best_checkpoint(full_run, "selector"), map_location="cpu", weights_only=False)["state_dict"]
    state = encoder.state_dict()
    encoder_weights = {key.removeprefix("encoder."): t for key, t in trained.items() if key.startswith("encoder.")}
    assert encoder_weights and sorted(encoder_weights) == sorted(state)  # nothing newly initialised, nothing left
    for key, tensor in encoder_weights.items():  # every trained encoder weight, as stock transformers reads it
        assert torch.equal(state[key], tensor), key
    with torch.no_grad():
        hidden = encoder(**tokenizer("Who founded Rome?", return_tensors="pt")).last_hidden_state
    assert hidden.shape[-1] == encoder.config.hidden_size


@pytest.mark.slow
def test_a_reused_selector_travels_with_the_export(full_run: Path, tmp_path: Path) -> None:  # noqa: F811
    """A run that reused another run's selector (`model.selector_checkpoint=PATH`) exports that selector too: the
    export loads with the other run gone, and with no package or hub to read, to the same predictions."""

    other = shutil.copytree(full_run, tmp_path / "other")
    reusing = shutil.copytree(full_run, tmp_path / "reusing")
    shutil.rmtree(reusing / "selector")  # its selector is the other run's
    config = OmegaConf.load(reusing / "config.yaml")
    config.model.selector_checkpoint = str(best_checkpoint(other, "selector"))
    OmegaConf.save(config, reusing / "config.yaml")
    predictions = [json.loads(line) for line in (full_run / "predictions.jsonl").read_text().splitlines()]
    expected = [
        (p["id"], p["predicted_answer"], p["predicted_support_idxs"], p["predicted_answer_confidence"])
        for p in predictions
    ]
    gold = gold_subset("musique_full", QUESTIONS, tmp_path / "gold.jsonl")
    records = [json.loads(line) for line in gold.read_text().splitlines()]

    out = export_run(reusing, tmp_path / "export")
    manifest = json.loads((out / EXPORT_FILE).read_text())
    assert manifest["reused"] == {"model.selector_checkpoint": "reused_selector"}
    assert sorted(manifest["stages"]) == ["answerer", "reused_selector"]
    shutil.rmtree(other)
    with reading_only_the_export():
        answers = load_run(out, device="cpu").predict_records(records)
    assert [(a.id, a.answer, a.support_idxs, a.confidence) for a in answers] == expected
    # the other run gone, the reusing run itself can no longer be exported: said, and nothing half-written
    with pytest.raises(ExportError, match="the reused stage's checkpoint is gone"):
        export_run(reusing, tmp_path / "again")
    assert not (tmp_path / "again").exists() and not (tmp_path / ".again.partial").exists()


def best_checkpoint(run: Path, stage: str) -> Path:
    return run / json.loads((run / stage / STAGE_FILE).read_text())["best_checkpoint"]


@pytest.mark.slow
@pytest.mark.parametrize(
    ("name", "stage", "stock_class"),
    [
        ("select_generate-musique_full", "answerer", "AutoModelForSeq2SeqLM"),  # T5, embeddings tied to its head
        ("generative_reader-hotpotqa_20k", "reader", "AutoModelForCausalLM"),  # Llama
    ],
)
def test_a_generative_stage_loads_with_stock_transformers(
    name: str, stage: str, stock_class: str, tmp_path: Path
) -> None:
    import transformers

    run = trained_run(tmp_path, name)
    out = export_run(run, tmp_path / "export")
    network = json.loads((out / EXPORT_FILE).read_text())["stages"][stage]["backbone"]
    model = getattr(transformers, stock_class).from_pretrained(out / network["folder"])
    state = model.state_dict()
    trained = torch.load(best_checkpoint(run, stage), map_location="cpu", weights_only=False)["state_dict"]
    own = {key.removeprefix("model."): tensor for key, tensor in trained.items() if key.startswith("model.")}
    assert own and sorted(own) == sorted(state)
    for key, tensor in own.items():  # tied weights included: what stock transformers rebuilds is what was trained
        assert torch.equal(state[key], tensor), key
    assert (
        f'{stock_class}.from_pretrained("path/to/this/folder/{network["folder"]}")' in (out / "README.md").read_text()
    )


@pytest.mark.slow
def test_a_backbone_that_does_not_round_trip_is_exported_whole(
    full_run: Path,  # noqa: F811
    tmp_path: Path,
    monkeypatch: pytest.MonkeyPatch,
) -> None:
    """The export rebuilds each stage's state dict from the files it wrote before relying on them: a backbone whose
    saved weights do not give the module's back (here, read under the wrong prefix) is not split off; the stage is
    exported whole, and loads to the same predictions (its backbone then read from its package)."""
    import musique_models.runs.exported as exported

    save_backbone = exported._save_backbone

    def wrong_prefix(*args: object, **kwargs: object) -> dict | None:
        saved = save_backbone(*args, **kwargs)
        return saved and {**saved, "prefix": "elsewhere."}

    monkeypatch.setattr(exported, "_save_backbone", wrong_prefix)
    out = export_run(full_run, tmp_path / "export")
    manifest = json.loads((out / EXPORT_FILE).read_text())
    assert all("backbone" not in entry for entry in manifest["stages"].values())
    for stage in ("selector", "answerer"):
        trained = torch.load(best_checkpoint(full_run, stage), map_location="cpu", weights_only=False)["state_dict"]
        whole = load_file(out / stage / "model.safetensors")
        assert sorted(whole) == sorted(trained) and not (out / stage / "backbone").exists()
    assert all(entry["whole"] for entry in manifest["stages"].values())
    with pytest.raises(pytest.fail.Exception, match="read a backbone outside the export"), reading_only_the_export():
        load_run(out, device="cpu")  # the guard the contract test loads every export under does catch such a read
    predictions = [json.loads(line) for line in (full_run / "predictions.jsonl").read_text().splitlines()]
    gold = gold_subset("musique_full", QUESTIONS, tmp_path / "gold.jsonl")
    answers = load_run(out, device="cpu").predict_records([json.loads(line) for line in gold.read_text().splitlines()])
    assert [(a.id, a.answer, a.confidence) for a in answers] == [
        (p["id"], p["predicted_answer"], p["predicted_answer_confidence"]) for p in predictions
    ]


@pytest.mark.slow
def test_the_cards_stock_selector_snippet_scores_as_the_selector(full_run: Path, tmp_path: Path) -> None:  # noqa: F811
    """The card's `relevance(question, paragraph)` (stock transformers, a few lines of torch), run as the card
    prints it, gives the selector's own score on the selector's own features, a paragraph past its token limit
    included."""
    from musique_models.features.selector import featurize_selector
    from musique_models.models.backbone import load_tokenizer
    from musique_models.models.selector import load_selector

    out = export_run(full_run, tmp_path / "export")
    card = (out / "README.md").read_text()
    snippet = card.split("its relevance score with stock `transformers`:\n\n```python\n")[1].split("```")[0]
    namespace: dict = {}
    exec(snippet.replace("path/to/this/folder", str(out)), namespace)  # noqa: S102 (the card's own code)

    selector = load_selector(str(best_checkpoint(full_run, "selector"))).eval()
    tokenizer = load_tokenizer(selector.hparams.backbone)
    config = OmegaConf.load(full_run / "config.yaml")
    room = min(config.model.selector.max_length, selector.hparams.backbone.max_length - 2)
    record = json.loads((SAMPLES / "musique_ans" / "dev.jsonl").read_text().splitlines()[0])
    question = "  Who founded   the city\twhere the author was born? "
    paragraphs = [p["paragraph_text"] for p in record["paragraphs"][:3]] + [" long paragraph " * 400]
    batch = {
        "question": [question],
        "paragraphs": [[{"idx": i, "text": text, "is_supporting": False} for i, text in enumerate(paragraphs)]],
    }
    features = featurize_selector(batch, [0], tokenizer, max_length=room)
    assert max(len(ids) for ids in features["input_ids"]) == room + 2  # the long paragraph is clipped
    for row, paragraph in enumerate(paragraphs):
        tensors = {key: torch.tensor([features[key][row]]) for key in ("input_ids", "attention_mask", "token_type_ids")}
        with torch.no_grad():
            expected = float(selector(**tensors)[0])
        assert namespace["relevance"](question, paragraph) == pytest.approx(expected, abs=1e-5)


@pytest.mark.slow
def test_a_prompted_llms_export_holds_its_llm_and_its_card_says_nothing_was_trained(tmp_path: Path) -> None:
    """`model=llm_prompt` trains nothing: its export holds the LLM as used (stage `reader`, from the recipe's
    `untrained_modules`) and its card says it was prompted; a run that generated with vLLM exports without vLLM."""
    run = trained_run(tmp_path, "llm_prompt-musique_ans")
    config = OmegaConf.load(run / "config.yaml")
    config.model.engine = "vllm"  # not installed here: the export must not need it
    OmegaConf.save(config, run / "config.yaml")
    out = export_run(run, tmp_path / "export")
    entry = json.loads((out / EXPORT_FILE).read_text())["stages"]["reader"]
    assert entry["untrained"] and entry["backbone"]["kind"] == "causal_lm"
    card = (out / "README.md").read_text()
    assert "nothing trained: the model is prompted, with" in card and "training questions capped" not in card
    assert "Each stage's pretrained network, as used," in card
