// Talks to a running `leoam serve` through two third-party clients, as an application would: the
// Vercel AI SDK (`ai` with `@ai-sdk/openai-compatible`) and LangChain (`@langchain/openai`). Each
// does a chat, a streamed chat with its usage, a completion, structured output of a schema
// (response_format json_schema, which the server samples under), a required tool call, and tools
// the model may call (tool_choice auto: stories260K answers text). Prints one JSON object on
// stdout.
// Usage: node third_party_clients.mjs NPM_DIR BASE_URL API_KEY MODEL
import { createRequire } from "node:module";
import path from "node:path";

const [npmDir, baseURL, apiKey, model] = process.argv.slice(2);
const require = createRequire(path.join(npmDir, "package.json"));
const ai = require("ai");
const { createOpenAICompatible, OpenAICompatibleChatLanguageModel } = require("@ai-sdk/openai-compatible");
const { ChatOpenAI, OpenAI } = require("@langchain/openai");
const { z } = require("zod");

const question = "Tell me a story.";
const out = { vercel: {}, langchain: {} };

// The Vercel AI SDK.
{
  const provider = createOpenAICompatible({ name: "leoam", baseURL, apiKey });
  // The chat model as a custom provider makes it, to say what the server supports: streamed usage,
  // and structured outputs (generateObject then sends its schema as response_format json_schema).
  const structured = new OpenAICompatibleChatLanguageModel(model, {}, {
    provider: "leoam.chat", url: ({ path: p }) => `${baseURL}${p}`, headers: () => ({ Authorization: `Bearer ${apiKey}` }),
    includeUsage: true, supportsStructuredOutputs: true, defaultObjectGenerationMode: "json",
  });
  const chat = await ai.generateText({ model: provider.chatModel(model), prompt: question, maxTokens: 24, temperature: 0 });
  out.vercel.chat = { text: chat.text, usage: chat.usage };
  const stream = ai.streamText({ model: structured, prompt: question, maxTokens: 24, temperature: 0 });
  let text = "";
  for await (const part of stream.textStream) text += part;
  out.vercel.stream = { text, usage: await stream.usage };
  const completion = await ai.generateText({
    model: provider.completionModel(model), prompt: "Once upon a time", maxTokens: 8, temperature: 0 });
  out.vercel.completion = completion.text;
  const weather = { weather: ai.tool({ description: "the weather", parameters: z.object({ city: z.string().max(12) }),
                                       execute: async ({ city }) => `sunny in ${city}` }) };
  {
    const free = await ai.generateText({ model: provider.chatModel(model), prompt: question, maxTokens: 8, maxRetries: 0,
                                         tools: weather });
    out.vercel.tools = { text: free.text, calls: free.toolCalls.length };
  }
  try {
    const called = await ai.generateText({ model: provider.chatModel(model), prompt: question, maxTokens: 60,
                                           maxRetries: 0, tools: weather, toolChoice: "required" });
    out.vercel.tool_call = { name: called.toolCalls[0]?.toolName, args: called.toolCalls[0]?.args,
                             result: called.toolResults[0]?.result };
  } catch (e) {
    out.vercel.tool_call = { error: `${e?.message ?? e}` };
  }
  try {
    const made = await ai.generateObject({ model: structured, prompt: question, maxTokens: 40, maxRetries: 0,
                                           mode: "json", schema: z.object({ title: z.string().max(20) }) });
    out.vercel.json = { object: made.object };
  } catch (e) {
    out.vercel.json = { error: `${e?.message ?? e}` };
  }
}

// LangChain.
{
  const chatModel = new ChatOpenAI({ model, apiKey, configuration: { baseURL }, temperature: 0, maxTokens: 24,
                                     maxRetries: 0, streamUsage: true });
  const chat = await chatModel.invoke(question);
  out.langchain.chat = { text: chat.content, usage: chat.usage_metadata };
  let text = "";
  let usage = null;
  for await (const chunk of await chatModel.stream(question)) {
    text += chunk.content;
    if (chunk.usage_metadata) {  // LangChain adds up every chunk's usage: sent once, it is right
      usage = usage === null ? { ...chunk.usage_metadata }
                             : { input_tokens: usage.input_tokens + chunk.usage_metadata.input_tokens,
                                 output_tokens: usage.output_tokens + chunk.usage_metadata.output_tokens,
                                 total_tokens: usage.total_tokens + chunk.usage_metadata.total_tokens };
    }
  }
  out.langchain.stream = { text, usage };
  const llm = new OpenAI({ model, apiKey, configuration: { baseURL }, temperature: 0, maxTokens: 8, maxRetries: 0 });
  out.langchain.completion = await llm.invoke("Once upon a time");
  const weatherTool = { type: "function", function: { name: "weather", description: "the weather",
    parameters: { type: "object", properties: { city: { type: "string", maxLength: 12 } }, required: ["city"] } } };
  {
    const free = await chatModel.bindTools([weatherTool]).invoke(question);
    out.langchain.tools = { text: free.content, calls: free.tool_calls.length };
  }
  try {
    const called = await new ChatOpenAI({ model, apiKey, configuration: { baseURL }, temperature: 0, maxTokens: 60,
                                          maxRetries: 0 }).bindTools([weatherTool], { tool_choice: "required" }).invoke(question);
    out.langchain.tool_call = { name: called.tool_calls[0]?.name, args: called.tool_calls[0]?.args };
  } catch (e) {
    out.langchain.tool_call = { error: `${e?.message ?? e}` };
  }
  try {
    const made = await new ChatOpenAI({ model, apiKey, configuration: { baseURL }, temperature: 0, maxTokens: 40,
                                        maxRetries: 0 })
      .withStructuredOutput(z.object({ title: z.string().max(20) }), { method: "jsonSchema" }).invoke(question);
    out.langchain.json = { object: made };
  } catch (e) {
    out.langchain.json = { error: `${e?.message ?? e}` };
  }
}

console.log(JSON.stringify(out));
