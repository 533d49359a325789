// Talks to a running `leoam serve` through the official `openai` npm client: the model list, a
// chat completion of the model it names, the same streamed, a completion, JSON output of a schema,
// a tool loop (a required call, its result, an answer), and two requests the server must refuse
// (too many tokens, a model it does not serve).
// Prints one JSON object on stdout.
// Usage: node openai_client.cjs NPM_DIR BASE_URL API_KEY   (NPM_DIR holds node_modules/openai)
const path = require("path");
const mod = require(path.join(process.argv[2], "node_modules", "openai"));
const OpenAI = mod.OpenAI || mod.default || mod;

(async () => {
  const client = new OpenAI({ baseURL: process.argv[3], apiKey: process.argv[4], maxRetries: 0 });
  const out = {};
  out.models = (await client.models.list()).data.map((m) => m.id);
  const model = out.models[0];
  const ask = { model, messages: [{ role: "user", content: "Tell me a story." }], max_tokens: 24, temperature: 0 };
  const chat = await client.chat.completions.create(ask);
  out.chat = { text: chat.choices[0].message.content, finish: chat.choices[0].finish_reason, usage: chat.usage };
  let text = "", chunks = 0;
  for await (const chunk of await client.chat.completions.create({ ...ask, stream: true })) {
    chunks += 1;
    if (chunk.choices.length) text += chunk.choices[0].delta.content || "";
  }
  out.stream = { text, chunks };
  const completion = await client.completions.create({ model, prompt: "Once upon a time", max_tokens: 8, temperature: 0 });
  out.completion = completion.choices[0].text;
  try {
    await client.chat.completions.create({ ...ask, max_tokens: 1 << 30 });
    out.error = null;
  } catch (e) {
    out.error = { status: e.status, param: e.param, type: e.type, message: e.message };
  }
  // JSON output of a schema, and a tool loop: a required call, its result, then an answer.
  const schema = { type: "object", properties: { title: { type: "string", maxLength: 20 } }, required: ["title"] };
  const structured = await client.chat.completions.create({
    ...ask, max_tokens: 40, response_format: { type: "json_schema", json_schema: { name: "story", schema } } });
  out.json = JSON.parse(structured.choices[0].message.content);
  const tools = [{ type: "function", function: { name: "weather", parameters: {
    type: "object", properties: { city: { type: "string", maxLength: 12 } }, required: ["city"] } } }];
  const first = await client.chat.completions.create({ ...ask, max_tokens: 40, tools, tool_choice: "required" });
  const call = first.choices[0].message.tool_calls[0];
  out.tool_call = { finish: first.choices[0].finish_reason, name: call.function.name,
                    args: JSON.parse(call.function.arguments) };
  const second = await client.chat.completions.create({ ...ask, max_tokens: 8, tools, messages: [
    ...ask.messages, first.choices[0].message, { role: "tool", tool_call_id: call.id, content: "sunny" }] });
  out.after_tool = { finish: second.choices[0].finish_reason, text: second.choices[0].message.content };
  try {
    await client.completions.create({ model: "gpt-unknown", prompt: "x", max_tokens: 1 });
    out.unknown_model = null;
  } catch (e) {
    out.unknown_model = { status: e.status, code: e.code };
  }
  console.log(JSON.stringify(out));
})().catch((e) => {
  console.error(e);
  process.exit(1);
});
