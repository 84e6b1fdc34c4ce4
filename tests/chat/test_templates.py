"""Real chat templates render as transformers' ``apply_chat_template`` and tokenize token-exact."""

from __future__ import annotations

import warnings
from typing import Any

import pytest
from tokenizers import Tokenizer, models
from transformers import PreTrainedTokenizerFast

from agentwarm import chat
from agentwarm.chat import ChatTemplate, PrefixUnstableWarning, render_ids
from agentwarm.errors import ConfigError
from tests.chat.families import FAMILIES, FIXTURES, STABLE, TOOLS, Family, conversation

#: How many leading messages of :func:`conversation` each template keeps stable.
STABLE_MESSAGES = {"qwen2_5": 6, "llama3_1_json": 6, "hermes": 6, "mistral_v3": 1, "qwen3": 2}


def hf_tokenizer(family: Family) -> PreTrainedTokenizerFast:
    """A Hugging Face tokenizer carrying ``family``'s template and special tokens (its vocabulary
    does not matter: only the text rendering is compared)."""
    backend = Tokenizer(models.WordLevel({"<unk>": 0}, unk_token="<unk>"))
    tok = PreTrainedTokenizerFast(
        tokenizer_object=backend,
        unk_token="<unk>",
        bos_token=family.bos_token or None,
        eos_token=family.eos_token or None,
    )
    tok.chat_template = family.template.source
    return tok


def with_dict_arguments(messages: list[dict[str, Any]]) -> list[dict[str, Any]]:
    """``messages`` with tool-call arguments as objects, as the OpenAI endpoints pass them."""
    return chat.openai_messages(messages)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_render_is_apply_chat_template(name: str) -> None:
    family = FAMILIES[name]
    variables = dict(family.variables)
    messages = conversation()
    expected = hf_tokenizer(family).apply_chat_template(
        with_dict_arguments(messages),
        tools=TOOLS,
        add_generation_prompt=True,
        tokenize=False,
        **variables,
    )
    assert family.template.render(messages, tools=TOOLS, **variables) == expected
    # arguments given as objects render the same
    rendered = family.template.render(with_dict_arguments(messages), tools=TOOLS, **variables)
    assert rendered == expected
    # and the reply was not touched: its arguments are still a string
    assert isinstance(messages[2]["tool_calls"][0]["function"]["arguments"], str)


@pytest.mark.parametrize("name", sorted(FAMILIES))
def test_render_ids_are_the_whole_prompt_tokenized(name: str) -> None:
    family = FAMILIES[name]
    variables = dict(family.variables)
    messages = conversation()
    text = family.template.render(messages, tools=TOOLS, add_generation_prompt=True, **variables)
    with warnings.catch_warnings():
        warnings.simplefilter("ignore", PrefixUnstableWarning)
        rendered = render_ids(family.template, family.encode, messages, tools=TOOLS, **variables)
    assert rendered.text == text
    assert rendered.ids == family.encode(text)
    assert rendered.stable == STABLE_MESSAGES[name]
    assert len(rendered.boundaries) == rendered.stable + 1
    assert rendered.boundaries == sorted(rendered.boundaries)
    assert rendered.prefix_ids == rendered.ids[: rendered.boundaries[-1]]


@pytest.mark.parametrize("name", STABLE)
def test_each_stable_prefix_is_a_prefix_of_the_whole(name: str) -> None:
    family = FAMILIES[name]
    messages = conversation()
    whole = family.render_ids(messages, tools=TOOLS)
    assert whole.stable == len(messages)
    for k in range(1, len(messages) + 1):
        part = family.prefix_ids(messages[:k], TOOLS)
        if part is None:
            # Llama 3.1 puts the tools in the first user message: the system alone cannot render
            assert (name, k) == ("llama3_1_json", 1)
            assert whole.boundaries[k] == 0
        else:
            assert part == whole.ids[: whole.boundaries[k]]


def test_a_template_that_cannot_render_raises_config_error() -> None:
    hermes = FAMILIES["hermes"].template
    tool_without_name = {"role": "tool", "tool_call_id": "call8JX2W", "content": "{}"}
    with pytest.raises(ConfigError, match=r"hermes.*name"):
        hermes.render([{"role": "user", "content": "hi"}, tool_without_name])
    with pytest.raises(ConfigError, match="broken"):
        ChatTemplate("{% if %}", name="broken").render([])


def test_no_tools_renders_as_none() -> None:
    """An empty tool list is no tools: Llama's template would otherwise announce an ipython
    environment with no functions."""
    llama = FAMILIES["llama3_1_json"]
    messages = conversation()[:2]
    assert llama.template.render(messages, tools=[], date_string="1 Jan 2025") == (
        llama.template.render(messages, tools=None, date_string="1 Jan 2025")
    )
    assert "Environment: ipython" not in llama.template.render(messages, tools=[])


def test_qwen2_5_ships_with_the_package_and_equals_the_fixture() -> None:
    assert chat.QWEN2_5.name == "qwen2.5"
    assert chat.QWEN2_5.source == (FIXTURES / "qwen2_5.jinja").read_text(encoding="utf-8")
    assert chat.QWEN2_5.eos_token == "<|im_end|>"
    assert chat.QWEN2_5.bos_token == ""
    assert chat.QWEN2_5.family == "hermes"


def test_families_read_from_the_source() -> None:
    assert FAMILIES["llama3_1_json"].template.family == "llama3"
    assert FAMILIES["mistral_v3"].template.family == "mistral"
    assert FAMILIES["hermes"].template.family == "hermes"
    assert FAMILIES["qwen3"].template.family == "hermes"
    assert chat.FALLBACK.family is None
    # a template without markers: the name tells
    assert ChatTemplate("{{ messages }}", name="Mistral-Small").family == "mistral"
