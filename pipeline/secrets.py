"""The one rule that keeps credentials out of the lake, the warehouse, logs, Dagster metadata and reports.

Every source applies it, once, where values enter: config and summary of every run, run names, tags and groups,
history keys and values, event field names and values, and the messages of skipped lines. Whatever it hides is
replaced by ``REDACTED``.

**Names.** A name (config/summary key, history key, event field) names a credential when one of its path
components (split on ``.`` and ``/``) ends with a credential word. Precision matters both ways: ``wandb_key``,
``hf_token``, ``private_key_pem``, ``auth_header``, ``x-api-key``, ``clientSecret`` are credentials;
``max_new_tokens``, ``tokenizer``, ``pad_token``, ``time_per_token``, ``token_count``, ``kl_key``, ``monkey``,
``author``, ``keyword``, ``public_key``, ``credentials_path`` are not. So:

- ``password``/``passwd``/``passphrase``/``secret``/``credential``/``authorization``/``cookie`` (plural too)
  end a credential name whatever precedes them (``db_password``, ``client_secret``, ``gcp_credentials``);
- ``key``/``token`` only after a word that says whose or what kind (``api``, ``access``, ``refresh``, ``auth``,
  ``private``, ``secret``, ``client``, ``session``, a service: ``wandb``, ``openai``, ``hf``, ``github``,
  ``axiom``...), glued, camelCased or separated (``apikey``, ``accessToken``, ``hf_token``). Never a bare ``key``,
  never ``tokens`` (a count: ``total_tokens``), never a tokenizer's ``pad_token``/``eos_token``;
- a component that is exactly ``token``, or ends with ``auth``/``dsn`` (``auth``, ``basic_auth``, ``sentry_dsn``),
  is a credential only as the *last* component: ``auth/token`` is one, ``token/entropy`` or ``auth/latency_ms``
  are metric namespaces;
- a credential word may be followed by one format word: ``private_key_pem``, ``auth_header``, ``api_key_b64``
  (but ``api_key_path``, ``password_length``, ``secret_name`` say something about the credential, not it).

In a nested dict (config, summary, a logged dict before it is flattened), a key that names a credential hides its
whole value, dicts and lists included, just as its flattened names (``credentials.user``) would be hidden. The
name rule is one pattern (``NAME_PATTERN``) that Python's ``re`` and RE2 read alike, so Arrow
(``pyarrow.compute.match_substring_regex``) and DuckDB (``regexp_matches(key, ...)``, to audit a lake written
before this rule) apply exactly the rule the sources do. History keys are checked once per distinct key of a
batch (``redact_history``), not once per value.

**Values.** A string names no key but may still hold a credential (a logged command line, an HTTP header quoted
in an error, a token pasted into a run name). ``redact_text`` replaces the credential *part* of a string and keeps
the rest: ``Bearer <token>``; PEM private-key blocks; known formats (OpenAI/Anthropic ``sk-...`` with digits and
capitals, Hugging Face ``hf_...``, GitHub ``ghp_/gho_/ghu_/ghs_/ghr_/github_pat_``, GitLab ``glpat-``, AWS
``AKIA...``, Axiom ``xaat-/xapt-``, Slack ``xox?-``, Stripe ``sk_live_``, Google ``AIza...``, JWTs, W&B's
``wandb_v1_...`` and on-prem ``local-<40 hex>`` keys); a password inside a URL (``https://user:pw@host``);
and the value after a credential name in text (``--api-key X``, ``WANDB_API_KEY=X``, ``"password": "X"``,
``Authorization: Basic X``, ``wandb login X``). A bare 40-hex string is *not* redacted: a classic W&B API key
looks exactly like a git commit sha, and shas are everywhere (``git_commit``, tags, artifact digests); such a key
is caught where it is named (a credential key, ``WANDB_API_KEY=``, ``--api-key``, ``wandb login``). Numbers are
never inspected by the value rule.
"""

from __future__ import annotations

import re
from typing import Any

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

REDACTED = "***redacted***"
REDACTED_TYPE = "redacted"  # history value_type of a value the rule replaced

# --------------------------------------------------------------------------------------------------------- names

_SEP = r"[_\- ]"
# Credential words that end a credential name whatever precedes them.
_STRONG = r"(?:password|passwd|passphrase|secret|credential|authorization|cookie)s?"
# Words that make a following key/token a credential; any prefix may come before the long ones.
_QUALIFIERS = (
    "api|auth|access|refresh|secret|private|client|bearer|session|signing|encryption|master|license"
    "|account|deploy|registry|consumer|oauth|jwt|csrf|xsrf|wandb|openai|anthropic|claude|huggingface"
    "|github|gitlab|axiom|slack|discord|telegram|azure|google|gemini|cohere|mistral|groq|replicate"
    "|pinecone|deepseek|openrouter|fireworks|comet|neptune|mlflow|stripe|sentry|datadog|docker|pypi"
)
# Short ones only as a word of their own (after a separator or at the start): ``hf_token``, not ``...chf_token``.
_SHORT_QUALIFIERS = "hf|gh|hub|bot|npm|aws|gcp|ssh|gpg|pgp|dd|xai"
_FORMAT = _SEP + r"?(?:pem|der|b64|base64|header|hdr|value|val|str|string|text|raw|hex|json|bytes|encoded)"
_CORE = (
    rf"(?:[^./]*{_STRONG}"
    rf"|[^./]*(?:{_QUALIFIERS}){_SEP}?(?:token|keys?)"
    rf"|(?:[^./]*{_SEP})?(?:{_SHORT_QUALIFIERS}){_SEP}?(?:token|keys?)"
    rf"|(?:[^./]*{_SEP})?o?auth{_FORMAT})"
)
_LAST_ONLY = rf"(?:token|(?:[^./]*{_SEP})?(?:o?auth|dsn))"
_ANY_COMPONENT = rf"(?i)(?:^|[./]){_CORE}(?:{_FORMAT})?(?:$|[./])"
NAME_PATTERN = rf"{_ANY_COMPONENT}|(?:^|[./]){_LAST_ONLY}$"
_NAME = re.compile(NAME_PATTERN)
_HIDES_ALL = re.compile(_ANY_COMPONENT)  # names a credential whatever follows it: hides a dict under it too
_name_cache: dict[str, bool] = {}
PLAIN_NAMES: set[str] = set()  # names seen not to name a credential (``name in PLAIN_NAMES``: no call, for hot loops)


def is_secret_name(name: Any) -> bool:
    """Does this key / field name / history key name a credential? (cached: names repeat)"""
    try:
        return _name_cache[name]
    except (KeyError, TypeError):
        pass
    text = name if type(name) is str else str(name)
    found = _NAME.search(text) is not None
    if len(_name_cache) > 50_000:
        _name_cache.clear()
        PLAIN_NAMES.clear()
    if type(name) is str:
        _name_cache[name] = found
        if not found:
            PLAIN_NAMES.add(name)
    return found


# -------------------------------------------------------------------------------------------------------- values

_B = r"(?<![A-Za-z0-9_\-])"  # a token starts here
_E = r"(?![A-Za-z0-9_\-])"  # and ends here
# Known credential formats, whole; each is replaced by REDACTED.
_FORMATS = "|".join(
    [
        (
            r"-----BEGIN[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----"
            r"(?:.*?-----END[A-Z0-9 ]{0,40}PRIVATE KEY(?: BLOCK)?-----|.*)"
        ),
        _B + r"sk-(?=[A-Za-z0-9_\-]*[0-9])(?=[A-Za-z0-9_\-]*[A-Z])[A-Za-z0-9_\-]{20,}",  # OpenAI, Anthropic sk-ant-
        _B + r"[rs]k_(?:live|test)_[A-Za-z0-9]{16,}",  # Stripe
        _B + r"hf_[A-Za-z0-9]{30,}" + _E,  # Hugging Face
        _B + r"gh[pousr]_[A-Za-z0-9]{36,}" + _E,  # GitHub
        _B + r"github_pat_[A-Za-z0-9_]{22,}",
        _B + r"glpat-[A-Za-z0-9_\-]{20,}",  # GitLab
        r"(?<![A-Za-z0-9])(?:AKIA|ASIA)[A-Z0-9]{16}(?![A-Za-z0-9])",  # AWS access key id
        _B + r"xa[ap]t-[A-Za-z0-9\-]{20,}",  # Axiom API / personal tokens
        _B + r"xox[abposre]-[A-Za-z0-9\-]{10,}",  # Slack
        _B + r"AIza[0-9A-Za-z_\-]{35}",  # Google API key
        _B + r"eyJ[A-Za-z0-9_\-]{8,}\.eyJ[A-Za-z0-9_\-]{8,}\.[A-Za-z0-9_\-]*",  # JWT (header and payload are {"...)
        _B + r"wandb_v1_[A-Za-z0-9_]{30,}",  # W&B keys since 2025 (86 characters)
        _B + r"local-[0-9a-f]{40}" + _E,  # W&B server (on-prem) keys
    ]
)
# A scheme and its token: ``Bearer <token>`` (a long token with a digit: "the bearer of..." is prose).
_SCHEME = r"(?i:bearer)\s+(?=[A-Za-z\-._~+/]*[0-9])[A-Za-z0-9\-._~+/]{16,}=*"
# A password inside a URL: scheme://user:<password>@host
_URL = r"(?P<url>[A-Za-z][A-Za-z0-9+.\-]{0,20}://[^/\s:@\"']{1,200}:)[^/\s@\"']{1,200}(?=@)"
# A credential name, then ``=``/``:``/spaces, then its value: --api-key X, WANDB_API_KEY=X, "password": "X".
_ASSIGN = (
    r"(?P<name>(?<![A-Za-z0-9_.\-])-{0,2}[A-Za-z0-9_.\-]{0,60}?"
    r"(?i:key|token|secret|passw|passphrase|credential|auth|cookie|dsn)[A-Za-z0-9_\-]{0,20})"
    r"(?P<sep>[\"']?[ \t]*[:=][ \t]*[\"']?|[ \t]+)"
    r"(?P<val>(?i:(?:bearer|basic|token|digest)[ \t]+)?[^\s\"',;&<>)\]}]+)"
)
_LOGIN = r"(?P<login>(?i:wandb[ \t]+login)(?:[ \t]+--?[A-Za-z][A-Za-z\-]*)*[ \t]+)[A-Za-z0-9_\-]{40,}"
_VALUES = re.compile(f"(?P<fmt>{_FORMATS})|(?P<scheme>{_SCHEME})|{_URL}|{_LOGIN}", re.DOTALL)
_ASSIGNED = re.compile(_ASSIGN)
# Cheap first look, on the lowered text (a case-insensitive pattern is several times slower): a string with none
# of these cannot hold a credential the rule knows.
_HINT = re.compile(
    r"sk[-_]|rk_|hf_|gh[pousr]_|github_pat|glpat|akia|asia|xa[ap]t-|xox|aiza|eyj|wandb|local-"
    r"|-----begin|bearer|://|key|token|secret|passw|passphrase|credential|auth|cookie|dsn"
)
_PLACEHOLDERS = {"null", "none", "true", "false", "nil", "undefined", REDACTED}
_clean_cache: dict[str, bool] = {}  # short strings seen to hold nothing (event names, statuses, phases repeat)
# For loops that run per value (event fields): ``name in PLAIN_NAMES`` / ``text in CLEAN_TEXT`` answer most
# checks without a call; what they do not know goes through is_secret_name / redact_text.
CLEAN_TEXT = _clean_cache  # short strings known to hold no credential


def _looks_random(text: str) -> bool:
    return len(text) >= 16 and any(c.isdigit() for c in text) and any(c.isalpha() for c in text)


def _replace(m: re.Match) -> str:
    kind = m.lastgroup
    if kind == "fmt":
        return REDACTED
    if kind == "scheme":
        return m.group(0).split(None, 1)[0] + " " + REDACTED
    if m.group("url") is not None:
        return m.group("url") + REDACTED
    return m.group("login") + REDACTED


def _replace_assigned(m: re.Match) -> str:
    name, sep, val = m.group("name"), m.group("sep"), m.group("val")
    if REDACTED in val or val.lower() in _PLACEHOLDERS or not is_secret_name(name.strip("-")):
        return m.group(0)
    if not sep.strip() and not name.startswith("-") and not _looks_random(val):
        return m.group(0)  # "the secret ingredient": prose, not an assignment
    scheme = val.split(None, 1)
    keep = scheme[0] + " " if len(scheme) == 2 else ""
    return name + sep + keep + REDACTED


def redact_text(text: str) -> str:
    """The string with every credential in it replaced by REDACTED (the same object when there is none)."""
    short = len(text) <= 64
    if short and text in _clean_cache:
        return text
    if _HINT.search(text.lower()) is not None:
        out = _ASSIGNED.sub(_replace_assigned, _VALUES.sub(_replace, text))
        if out != text:
            return out
    if short:
        if len(_clean_cache) > 100_000:
            _clean_cache.clear()
        _clean_cache[text] = True
    return text


def redact(value: Any) -> Any:
    """A decoded JSON value (config, summary, an event field, a logged list or media object) with credentials
    hidden: a dict key naming one hides its whole value; strings anywhere go through ``redact_text``. Returns
    the value itself when nothing changed (no copy)."""
    kind = type(value)
    if kind is str:
        return redact_text(value)
    if kind is dict:
        out = None
        for k, v in value.items():
            # as for the flat names these become: {"token": {"count": 5}} is token.count, no credential
            hide = is_secret_name(k) and (type(v) is not dict or _HIDES_ALL.search(str(k)) is not None)
            new = REDACTED if hide else redact(v)
            if new is not v:
                if out is None:
                    out = dict(value)
                out[k] = new
        return value if out is None else out
    if kind is list or kind is tuple:
        new_items = [redact(v) for v in value]
        return value if all(a is b for a, b in zip(new_items, value, strict=True)) else new_items
    return value


def redact_name(text: Any) -> Any:
    """A run name, group, tag: the value rule only (a name is not a key)."""
    return redact_text(text) if type(text) is str else text


# ------------------------------------------------------------------------------------------------------- history


def redact_history(columns: dict) -> dict:
    """The lake's typed history columns (``values.decode_columns``) with every value logged under a credential
    name replaced, whatever it was: value and value_int null, value_text REDACTED, value_type ``redacted``. The
    row stays, so that a logged secret shows as having been logged. (String values were already through
    ``redact_text`` in decode_columns.)

    The key column comes back dictionary-encoded, which is what makes this cheap: the names are checked once per
    distinct key of the batch (a few hundred), not per value (100k), and the Parquet writer, handed the
    dictionary, no longer hashes every key itself (the lake's history schema types ``key`` so; measured on 2M
    values, the encoding costs about what the writer saves)."""
    keys = pc.dictionary_encode(columns["key"])
    columns = dict(columns, key=keys)
    names = keys.dictionary.to_pylist()
    secret = [i for i, name in enumerate(names) if is_secret_name(name)]
    if not secret:
        return columns
    mask = pa.array(np.isin(keys.indices.to_numpy(zero_copy_only=False), secret))
    columns["value"] = pc.if_else(mask, pa.scalar(None, pa.float64()), columns["value"])
    columns["value_int"] = pc.if_else(mask, pa.scalar(None, pa.int64()), columns["value_int"])
    columns["value_text"] = pc.if_else(mask, pa.scalar(REDACTED, pa.string()), columns["value_text"])
    types = columns["value_type"]
    plain = types.dictionary_decode() if pa.types.is_dictionary(types.type) else types
    columns["value_type"] = pc.dictionary_encode(pc.if_else(mask, pa.scalar(REDACTED_TYPE, pa.string()), plain))
    return columns
