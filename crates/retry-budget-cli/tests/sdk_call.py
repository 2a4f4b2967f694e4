"""One call of one AI SDK, with the SDK's default retries, for sdk_interop.rs.

Usage: python sdk_call.py SDK BASE_URL
  SDK: openai | anthropic | groq | google-genai | mistralai | cohere
Each makes one GET (a model list or a model lookup), pointed at BASE_URL by
the SDK's documented base URL option, and prints one JSON line: the SDK's
version, whether the call succeeded, and the status it ended with.
`python sdk_call.py SDK --version` prints the version only (the import check).
"""

import json
import sys


def status_of(error):
    """The HTTP status an SDK's exception carries, or None."""
    for name in ("status_code", "code", "status"):
        value = getattr(error, name, None)
        if isinstance(value, int):
            return value
    response = getattr(error, "response", None)
    value = getattr(response, "status_code", None)
    return value if isinstance(value, int) else None


def outcome_of(error):
    """The proxy's `retry-budget-outcome` on the answer behind an error."""
    headers = getattr(getattr(error, "response", None), "headers", None)
    if headers is None:
        headers = getattr(error, "headers", None)
    try:
        return headers.get("retry-budget-outcome")
    except AttributeError:
        return None


def openai_call(base_url):
    import openai

    client = openai.OpenAI(base_url=base_url + "/v1", api_key="sk-test", timeout=30)
    return openai.__version__, lambda: client.models.list()


def anthropic_call(base_url):
    import anthropic

    client = anthropic.Anthropic(base_url=base_url, api_key="sk-ant-test", timeout=30)
    return anthropic.__version__, lambda: client.models.list()


def groq_call(base_url):
    import groq

    client = groq.Groq(base_url=base_url, api_key="gsk-test", timeout=30)
    return groq.__version__, lambda: client.models.list()


def genai_call(base_url):
    from google import genai
    from google.genai import types

    client = genai.Client(
        api_key="test",
        http_options=types.HttpOptions(base_url=base_url, timeout=30_000),
    )
    return genai.__version__, lambda: client.models.get(model="gemini-2.5-flash")


def mistral_call(base_url):
    from mistralai.client import Mistral
    from mistralai.client._version import __version__

    client = Mistral(api_key="test", server_url=base_url, timeout_ms=30_000)
    return __version__, lambda: client.models.list()


def cohere_call(base_url):
    import cohere

    client = cohere.ClientV2(api_key="test", base_url=base_url, timeout=30)
    return cohere.__version__, lambda: client.models.list()


CALLS = {
    "openai": openai_call,
    "anthropic": anthropic_call,
    "groq": groq_call,
    "google-genai": genai_call,
    "mistralai": mistral_call,
    "cohere": cohere_call,
}


def main():
    sdk, base_url = sys.argv[1], sys.argv[2]
    if base_url == "--version":
        # Building a client connects nowhere.
        print(CALLS[sdk]("http://127.0.0.1:9")[0])
        return
    version, call = CALLS[sdk](base_url)
    out = {"sdk": sdk, "version": version}
    try:
        call()
        out["ok"] = True
    except Exception as error:  # every SDK has its own error classes
        out["ok"] = False
        out["status"] = status_of(error)
        out["error"] = type(error).__name__
        out["outcome"] = outcome_of(error)
    print(json.dumps(out))


main()
