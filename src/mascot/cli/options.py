"""Typer option types still declared by hand: only `mascot chat` uses them, until its options are
generated from settings like every other command's. The help texts come from the shared settings
groups (`mascot.settings_groups`), so they are written once. Importing this module stays cheap.
"""

from __future__ import annotations

from typing import Annotated, Optional

import typer

from mascot.settings import help_for
from mascot.settings_groups import DataSettings, EndpointSettings


def _endpoint(name: str, *flags: str) -> typer.models.OptionInfo:
    return typer.Option("--" + name.replace("_", "-"), *flags, help=help_for(EndpointSettings, name))


Seed = Annotated[int, typer.Option("--seed", help=help_for(DataSettings, "seed"))]
ModelName = Annotated[Optional[str], _endpoint("model_name", "--model")]
VllmServerUrl = Annotated[Optional[list[str]], _endpoint("vllm_server_url")]
DirectorServerUrl = Annotated[Optional[list[str]], _endpoint("director_server_url")]
SpeakerServerUrl = Annotated[Optional[list[str]], _endpoint("speaker_server_url")]
DirectorModel = Annotated[Optional[str], _endpoint("director_model", "--directive-model")]
SpeakerModel = Annotated[Optional[str], _endpoint("speaker_model", "--agent-model")]
DirectorAdapter = Annotated[Optional[str], _endpoint("director_adapter")]
SpeakerAdapter = Annotated[Optional[str], _endpoint("speaker_adapter")]
ShareModel = Annotated[bool, _endpoint("share_model")]
