use super::*;
use crate::serving::tools::Markers;

/// Splits `text` fed in every split into two pieces and one byte at a time; each must give
/// the whole split's answer (decisions depend on the text only).
fn split_all_ways(parser: ReasoningParser, text: &str) -> (String, String) {
    let whole = split_whole(parser, text);
    let collect = |pieces: Vec<&str>| {
        let mut s = Splitter::new(parser);
        let mut out = Vec::new();
        for p in pieces {
            s.feed(p, &mut out);
        }
        s.finish(&mut out);
        let mut r = (String::new(), String::new());
        for o in out {
            match o {
                Out::Reasoning(t) => r.0.push_str(&t),
                Out::Content(t) => r.1.push_str(&t),
                Out::Call(_) => unreachable!("the splitter gives no calls"),
            }
        }
        r
    };
    for cut in (0..=text.len()).filter(|&i| text.is_char_boundary(i)) {
        let got = collect(vec![&text[..cut], &text[cut..]]);
        assert_eq!(got, whole, "{text:?} cut at {cut}");
    }
    let bytes: Vec<&str> = text
        .char_indices()
        .map(|(i, c)| &text[i..i + c.len_utf8()])
        .collect();
    assert_eq!(collect(bytes), whole, "{text:?} a character at a time");
    whole
}

fn pair(r: &str, c: &str) -> (String, String) {
    (r.to_string(), c.to_string())
}

#[test]
fn deepseek_reasons_up_to_the_close_tag_even_without_an_opening_one() {
    let p = ReasoningParser::DeepSeekR1;
    assert_eq!(
        split_all_ways(p, "\nLet me think.</think>\n\nThe answer is 4."),
        pair("Let me think.", "The answer is 4.")
    );
    // The model's own `<think>` is dropped.
    assert_eq!(
        split_all_ways(p, "<think>\nHmm, é.\n</think>Done"),
        pair("Hmm, é.\n", "Done")
    );
    // Never closed: all of it is reasoning (vLLM's deepseek_r1 parser does the same).
    assert_eq!(
        split_all_ways(p, "Still thinking <thi"),
        pair("Still thinking <thi", "")
    );
    // Only reasoning, then nothing.
    assert_eq!(split_all_ways(p, "abc</think>"), pair("abc", ""));
    // After the close tag everything is content, tags included.
    assert_eq!(
        split_all_ways(p, "a</think>b</think><think>c"),
        pair("a", "b</think><think>c")
    );
}

#[test]
fn qwen3_reasons_only_when_the_reply_opens_with_think() {
    let p = ReasoningParser::Qwen3;
    assert_eq!(
        split_all_ways(p, "<think>\nWhy? Because.\n</think>\n\nIt is 4."),
        pair("Why? Because.\n", "It is 4.")
    );
    // No tags: content, byte for byte (what `enable_thinking: false` gives).
    assert_eq!(
        split_all_ways(p, "  Just <b>an</b> answer"),
        pair("", "  Just <b>an</b> answer")
    );
    // A `<think>` later in the reply is content.
    assert_eq!(
        split_all_ways(p, "Answer <think>x</think>"),
        pair("", "Answer <think>x</think>")
    );
    // Cut off while thinking.
    assert_eq!(
        split_all_ways(p, "<think>partial </thin"),
        pair("partial </thin", "")
    );
    // A reply that is only the start of the tag is content.
    assert_eq!(split_all_ways(p, "<thi"), pair("", "<thi"));
    assert_eq!(split_all_ways(p, ""), pair("", ""));
}

#[test]
fn gpt_oss_channels_split_analysis_from_final() {
    let p = ReasoningParser::GptOss;
    let reply = "<|channel|>analysis<|message|>User asks 2+2. Easy.<|end|>\
                 <|start|>assistant<|channel|>final<|message|>2+2 = 4.";
    assert_eq!(
        split_all_ways(p, reply),
        pair("User asks 2+2. Easy.", "2+2 = 4.")
    );
    // A final message alone, and an analysis cut off.
    assert_eq!(
        split_all_ways(p, "<|channel|>final<|message|>Hi"),
        pair("", "Hi")
    );
    assert_eq!(
        split_all_ways(p, "<|channel|>analysis<|message|>thinking <|en"),
        pair("thinking <|en", "")
    );
    // Without the format: content.
    assert_eq!(split_all_ways(p, "plain text"), pair("", "plain text"));
    // A channel written without `<|end|><|start|>` still starts a new message.
    assert_eq!(
        split_all_ways(
            p,
            "<|channel|>analysis<|message|>a<|channel|>final<|message|>b"
        ),
        pair("a", "b")
    );
}

#[test]
fn the_template_tells_the_parser() {
    let d = ReasoningParser::detect;
    let harmony = "{{ '<|start|>assistant<|channel|>analysis<|message|>' }}";
    assert_eq!(d(harmony, None), Some(ReasoningParser::GptOss));
    assert_eq!(
        d("{{ '<think>' }}", Some("<|User|>hi<|Assistant|><think>\n")),
        Some(ReasoningParser::DeepSeekR1)
    );
    assert_eq!(
        d(
            "{% if not enable_thinking %}<think>\n\n</think>{% endif %}",
            Some("<|im_start|>assistant\n")
        ),
        Some(ReasoningParser::Qwen3)
    );
    assert_eq!(d("{{ messages }}", Some("x")), None);
    for name in ReasoningParser::NAMES {
        let p = ReasoningParser::from_name(name).expect("a known name");
        assert_eq!(p.name(), name);
    }
    assert_eq!(ReasoningParser::from_name("r1"), None);
}

#[test]
fn hidden_think_tokens_are_read_as_their_text_and_content_reaches_the_tool_parser() {
    use crate::serving::tools::{ChoiceReader, Family, ToolParse};
    let reasoning = Reasoning {
        parser: ReasoningParser::Qwen3,
        markers: Markers::from_pairs(&[(1, THINK_OPEN), (2, THINK_CLOSE)]),
    };
    let tools = ToolParse {
        family: Family::Hermes,
        max_calls: usize::MAX,
        markers: Markers::default(),
    };
    let mut r = ChoiceReader::new(Some(&tools), Some(&reasoning)).expect("a reader");
    let mut outs = Vec::new();
    // `<tool_call>` inside the thinking is thinking, not a call.
    for (id, t) in [
        (1, ""),
        (5, "use <tool_call> here"),
        (2, ""),
        (
            6,
            "\n<tool_call>\n{\"name\": \"f\", \"arguments\": {}}\n</tool_call>",
        ),
    ] {
        outs.extend(r.token(id, t));
    }
    outs.extend(r.end(""));
    assert_eq!(outs.len(), 2, "{outs:?}");
    assert_eq!(outs[0], Out::Reasoning("use <tool_call> here".into()));
    match &outs[1] {
        Out::Call(c) => assert_eq!(c.name, "f"),
        other => panic!("expected a call, got {other:?}"),
    }
    assert_eq!(r.calls(), 1);
}

mod lead_grammar {
    use engine::constraint::{CompiledConstraint, Constraint, Grammars};
    use model::LogitsProcessor;
    use tokenizer::{Tokenizer, Vocab, VocabModel};

    use super::*;

    const EOS: u32 = 2;
    const PIECES: [&str; 22] = [
        "<think>",
        "</think>",
        "<|channel|>",
        "<|message|>",
        "<|end|>",
        "<|start|>",
        "analysis",
        "final",
        "assistant",
        "\n",
        " ",
        "a",
        "b",
        "1",
        "{",
        "}",
        "\"",
        ":",
        "{\"",
        "\":",
        "<",
        "/",
    ];

    /// A vocabulary of `PIECES` (ids from 3), with `control` among them as control tokens.
    fn vocab(control: &[&str]) -> Tokenizer {
        let mut tokens = vec!["<unk>".to_string(), "<s>".into(), "</s>".into()];
        tokens.extend(PIECES.iter().map(|p| p.to_string()));
        let mut v = Vocab::new(VocabModel::Spm, tokens.clone());
        v.token_types = tokens
            .iter()
            .enumerate()
            .map(|(i, t)| match i {
                0 => 2,
                1 | 2 => 3,
                _ if control.contains(&t.as_str()) => 3,
                _ => 1,
            })
            .collect();
        v.scores = vec![0.0; tokens.len()];
        v.add_space_prefix = false;
        Tokenizer::from_vocab(&v).expect("a valid test vocabulary")
    }

    fn schema() -> Constraint {
        Constraint::JsonSchema(serde_json::json!({
            "type": "object", "properties": {"a": {"type": "integer"}},
            "required": ["a"], "additionalProperties": false
        }))
    }

    /// The reply `pieces` make if the grammar takes each in turn and then allows the end (the
    /// markers that are control tokens read back as their text), split by the parser.
    fn reply(
        r: &Reasoning,
        t: &Tokenizer,
        c: &CompiledConstraint,
        pieces: &[&str],
    ) -> Option<(String, String)> {
        let mut m = c.processor();
        let mut text = String::new();
        for p in pieces {
            let id = t.token_to_id(p).expect("a piece of the vocabulary");
            if !m.allows(id) {
                return None;
            }
            m.accept(id);
            text.push_str(r.markers.piece(id, &t.decode(&[id], true)));
        }
        m.allows(EOS).then(|| split_whole(r.parser, &text))
    }

    const ANSWER: [&str; 6] = ["{\"", "a", "\":", " ", "1", "}"];

    fn then_answer(lead: &[&'static str]) -> Vec<&'static str> {
        [lead, &ANSWER[..]].concat()
    }

    fn compiled(
        parser: ReasoningParser,
        control: &[&str],
    ) -> (Reasoning, Tokenizer, CompiledConstraint) {
        let t = vocab(control);
        let r = Reasoning::new(parser, &t);
        let c = Grammars::new(t.clone())
            .compile(&Constraint::After {
                lead: r.lead_grammar(),
                then: Box::new(schema()),
            })
            .unwrap_or_else(|e| panic!("{parser:?}: {e}\n{}", r.lead_grammar()));
        (r, t, c)
    }

    #[test]
    fn deepseek_r1_thinks_freely_then_answers_under_the_grammar() {
        for control in [&[][..], &["</think>"]] {
            let (r, t, c) = compiled(ReasoningParser::DeepSeekR1, control);
            let think = ["a", " ", "{", "</think>", "\n", "\n"];
            assert_eq!(
                reply(&r, &t, &c, &then_answer(&think)),
                Some(pair("a {", "{\"a\": 1}")),
                "{control:?}"
            );
            // The block the prompt opened must close; the answer must match.
            assert_eq!(reply(&r, &t, &c, &ANSWER), None, "{control:?}");
            assert_eq!(reply(&r, &t, &c, &["a", "</think>", "b"]), None);
        }
    }

    #[test]
    fn qwen3_may_think_first_and_the_answer_is_held_either_way() {
        let (r, t, c) = compiled(ReasoningParser::Qwen3, &[]);
        let think = ["<think>", "\n", "b", "}", "\n", "</think>", "\n", "\n"];
        assert_eq!(
            reply(&r, &t, &c, &then_answer(&think)),
            Some(pair("b}\n", "{\"a\": 1}"))
        );
        assert_eq!(reply(&r, &t, &c, &ANSWER), Some(pair("", "{\"a\": 1}")));
        assert_eq!(reply(&r, &t, &c, &["<think>", "a", "</think>", "b"]), None);
        assert_eq!(reply(&r, &t, &c, &["a"]), None);
    }

    #[test]
    fn gpt_oss_analysis_is_free_and_the_final_channel_is_held() {
        let markers = ["<|channel|>", "<|message|>", "<|end|>", "<|start|>"];
        let (r, t, c) = compiled(ReasoningParser::GptOss, &markers);
        let analysis = [
            "<|channel|>",
            "analysis",
            "<|message|>",
            "a",
            " ",
            "{",
            "<|end|>",
            "<|start|>",
            "assistant",
        ];
        let final_head = ["<|channel|>", "final", "<|message|>"];
        let full = [&analysis[..], &final_head[..], &ANSWER[..]].concat();
        assert_eq!(reply(&r, &t, &c, &full), Some(pair("a {", "{\"a\": 1}")));
        let direct = [&final_head[..], &ANSWER[..]].concat();
        assert_eq!(reply(&r, &t, &c, &direct), Some(pair("", "{\"a\": 1}")));
        // Without the final channel's header, or with free text in it, no.
        assert_eq!(reply(&r, &t, &c, &ANSWER), None);
        let loose = [&final_head[..], &["a"][..]].concat();
        assert_eq!(reply(&r, &t, &c, &loose), None);
    }
}
