"""Translates an OpenAI request into the engine's ``SamplingParams``, one per choice.

OpenAI leaves ``max_tokens`` open on chat and ``max_output_tokens`` on responses (use the rest of the context) and
defaults ``max_tokens`` to 16 on completions; a limit that cannot fit next to the prompt is the client's error (400 naming ``max_tokens``),
as in OpenAI and vLLM, rather than a silent truncation. ``n`` choices of a seeded request get seeds
``seed, seed + 1, ...`` so they differ from each other yet repeat across runs.
"""

from __future__ import annotations

from dataclasses import replace

from shoal.engine.core.errors import InvalidRequestError
from shoal.engine.core.sampling_params import SamplingParams
from shoal.engine.tool_parsers import ToolCallPlan
from shoal.protocol.errors import APIError, invalid_request
from shoal.protocol.openai_api import ChatCompletionRequest, CompletionRequest
from shoal.protocol.responses_api import ResponsesRequest
from shoal.protocol.structured_output import GrammarSpec, grammar_spec, response_format_spec, tool_grammar

SamplingRequest = CompletionRequest | ChatCompletionRequest
OpenAIRequest = CompletionRequest | ChatCompletionRequest | ResponsesRequest


def requested_logprobs(req: OpenAIRequest) -> int | None:
    """How many alternatives per token the client wants, or ``None`` for no logprobs at all."""
    if isinstance(req, ResponsesRequest):
        return req.logprobs()
    if isinstance(req, ChatCompletionRequest):
        return (req.top_logprobs or 0) if req.logprobs else None
    return req.logprobs


def _requested_limit(req: OpenAIRequest) -> tuple[int | None, str]:
    """The output limit the client set (``None``: the rest of the context) and the field it set it in."""
    if isinstance(req, ResponsesRequest):
        return req.max_output_tokens, "max_output_tokens"
    if isinstance(req, ChatCompletionRequest):
        return req.output_limit(), "max_completion_tokens" if req.max_completion_tokens else "max_tokens"
    return req.max_tokens, "max_tokens"


def output_limit(req: OpenAIRequest, prompt_len: int, max_model_len: int, prompt_field: str) -> int:
    """The number of tokens to generate at most, or a 400 when the prompt leaves no room for it."""
    if prompt_len >= max_model_len:
        raise invalid_request(
            f"This model's maximum context length is {max_model_len} tokens, but the prompt has {prompt_len} "
            "tokens (the prompt plus at least one generated token must fit).",
            param=prompt_field,
            code="context_length_exceeded",
        )
    limit, field = _requested_limit(req)
    room = max_model_len - prompt_len
    if limit is None:
        return room
    if limit > room:
        raise invalid_request(
            f"This model's maximum context length is {max_model_len} tokens; the prompt has {prompt_len} tokens "
            f"and {field} is {limit}, so at most {room} tokens can be generated.",
            param=field,
            code="context_length_exceeded",
        )
    return limit


def sampling_params(req: SamplingRequest, max_tokens: int, choice: int) -> SamplingParams:
    """The engine parameters of choice number ``choice`` (its seed is offset by it)."""
    stop = [req.stop] if isinstance(req.stop, str) else list(req.stop or [])
    try:
        return SamplingParams(
            temperature=1.0 if req.temperature is None else req.temperature,
            top_k=0 if req.top_k is None or req.top_k < 0 else req.top_k,
            top_p=1.0 if req.top_p is None else req.top_p,
            min_p=req.min_p or 0.0,
            repetition_penalty=1.0 if req.repetition_penalty is None else req.repetition_penalty,
            presence_penalty=req.presence_penalty or 0.0,
            frequency_penalty=req.frequency_penalty or 0.0,
            seed=None if req.seed is None else req.seed + choice,
            stop=stop,
            stop_token_ids=list(req.stop_token_ids or []),
            max_tokens=max_tokens,
            min_tokens=req.min_tokens,
            ignore_eos=req.ignore_eos,
            logprobs=requested_logprobs(req),
            skip_special_tokens=req.skip_special_tokens,
            logit_bias=req.token_bias(),
            structured_output=output_grammar(req),
        )
    except InvalidRequestError as exc:
        raise engine_error(exc) from None


def output_grammar(req: SamplingRequest) -> GrammarSpec | None:
    """The grammar the output follows: a required or named tool call's, else the structured-output fields'
    (the request models refuse both at once)."""
    tools = tool_grammar(req) if isinstance(req, ChatCompletionRequest) else None
    return tools or grammar_spec(req)


def responses_sampling_params(req: ResponsesRequest, max_tokens: int) -> SamplingParams:
    """A Responses request's engine parameters: it sets only temperature, top_p, logprobs and the grammar of its
    required or named tool call or of its text format (the request model refuses both at once)."""
    try:
        tools = tool_grammar(req.tool_fields(), "tools[{}].parameters")
        return SamplingParams(
            temperature=1.0 if req.temperature is None else req.temperature,
            top_p=1.0 if req.top_p is None else req.top_p,
            max_tokens=max_tokens,
            logprobs=requested_logprobs(req),
            structured_output=tools or response_format_spec(req.text_format(), "text.format"),
        )
    except InvalidRequestError as exc:
        raise engine_error(exc) from None


def reading_tool_calls(params: SamplingParams, plan: ToolCallPlan | None) -> SamplingParams:
    """The parameters with which the plan's format can be read: a marker that is a special token
    (``[TOOL_CALLS]``) must stay in the text."""
    if plan is not None and plan.fmt is not None and plan.fmt.keeps_special_tokens:
        return replace(params, skip_special_tokens=False)
    return params


def engine_error(exc: InvalidRequestError) -> APIError:
    """The engine's refusal as a 400 naming the same field."""
    return invalid_request(f"{exc.field}: {exc.reason}", param=exc.field)
