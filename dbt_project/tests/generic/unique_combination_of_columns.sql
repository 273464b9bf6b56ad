{% test unique_combination_of_columns(model, columns) %}
-- Combinations of `columns` that occur more than once (dbt_utils has the same test, but packages
-- would need a download at build time).
select {{ columns | join(', ') }}, count(*) as n
from {{ model }}
group by {{ columns | join(', ') }}
having count(*) > 1
{% endtest %}
