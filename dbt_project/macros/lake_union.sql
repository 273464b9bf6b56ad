{% macro lake_union(table, sources=none) %}
{#- Every ingest source's part of one lake table, matched by column name (a source may add columns);
    `lake_source` says which source wrote the row. -#}
{%- for name in (sources if sources is not none else var('lake_sources')) %}
    {% if not loop.first %}union all by name{% endif %}
    select *, '{{ name }}' as lake_source from {{ source('lake', name ~ '_' ~ table) }}
{%- endfor %}
{% endmacro %}
