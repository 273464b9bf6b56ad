{% macro user_aliases_table() %}
{#- The metric aliases of grpolens.yaml (`aliases: {logged_key: canonical_metric}`), written by grpolens before
    dbt runs (pipeline/aliases.py); `metrics` reads them beside the seed, and they win over it. -#}
main._user_metric_aliases
{%- endmacro %}

{% macro ensure_user_aliases_table() %}
{#- On-run-start: an empty table when grpolens has not written one (a hand-run dbt). -#}
create table if not exists {{ user_aliases_table() }} (source_key varchar, metric varchar)
{%- endmacro %}

{% macro user_aliases() %}
{#- The aliases as a model reads them: none in a unit test (no `this`), whose expectations hold for the seed alone,
    whatever grpolens.yaml says. -#}
{%- if this is none -%}
(select null::varchar as source_key, null::varchar as metric where false)
{%- else -%}
{{ user_aliases_table() }}
{%- endif -%}
{%- endmacro %}
