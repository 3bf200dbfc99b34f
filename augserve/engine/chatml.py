"""The ChatML / Hermes-style chat template with tool support: the embedded default
model's, and the fallback for a model directory without a template (rendered by
`augserve/engine/chat.py`)."""

CHATML_TEMPLATE = """\
{%- if tools %}
<|im_start|>system
{% if messages and messages[0].role == 'system' %}{{ messages[0].content }}

{% endif %}You can call functions. Their signatures, as JSON schemas, are listed in <tools></tools>:
<tools>
{% for tool in tools %}{{ tool | tojson }}
{% endfor %}</tools>
To call a function, answer with a JSON object holding its name and arguments inside \
<tool_call></tool_call> tags:
<tool_call>
{"name": "function name", "arguments": {"argument": "value"}}
</tool_call><|im_end|>
{% elif messages and messages[0].role == 'system' %}
<|im_start|>system
{{ messages[0].content }}<|im_end|>
{% endif %}
{%- for message in messages %}
{%- if message.role == 'system' %}{% if not loop.first %}
<|im_start|>system
{{ message.content }}<|im_end|>
{% endif %}
{%- elif message.role == 'tool' %}
<|im_start|>tool
<tool_response>
{{ message.content }}
</tool_response><|im_end|>
{% elif message.role == 'assistant' %}
<|im_start|>assistant
{% if message.content %}{{ message.content }}{% endif %}
{%- for call in message.tool_calls or [] %}
{%- set fn = call.function if call.function is defined else call %}
<tool_call>
{"name": {{ fn.name | tojson }}, "arguments": {{ fn.arguments | tojson }}}
</tool_call>
{%- endfor %}<|im_end|>
{% else %}
<|im_start|>{{ message.role }}
{{ message.content }}<|im_end|>
{% endif %}
{%- endfor %}
{%- if add_generation_prompt %}
<|im_start|>assistant
{% endif %}"""
