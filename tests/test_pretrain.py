"""BERT's inputs, pair task, pretraining and fine-tuning loops, and the corpus' sentence labels."""

from __future__ import annotations

import dataclasses

import pytest
import torch

from course_pkg.data import bert_inputs, corpus
from course_pkg.experiments.bert_comparison import (
    compare_pretraining,
    new_bert,
)
from course_pkg.models.bert import BERTClassifier, BERTEncoder, BERTModel
from course_pkg.training.bert_pretraining import (
    SETTINGS,
    fine_tune,
    predict,
    pretrain_bert,
)

ENGLISH = [
    "the cat sleeps .",
    "i see a dog .",
    "will you eat the cake ?",
    "she did not read .",
]
FRENCH = [
    "le chat dort .",
    "je vois un chien .",
    "est-ce que vous mangerez le gâteau ?",
    "elle n'a pas lu .",
]


def test_vocab_specials_and_single_inputs():
    vocab = bert_inputs.bert_vocab(ENGLISH + FRENCH)
    assert vocab.to_tokens(list(range(bert_inputs.NUM_SPECIAL))) == [
        "<pad>",
        "<bos>",
        "<eos>",
        "<unk>",
        "<cls>",
        "<sep>",
        "<mask>",
    ]
    tokens, segments, valid_lens = bert_inputs.encode_sentences(
        vocab, ENGLISH[:2], 7
    )
    assert valid_lens.tolist() == [6, 7]
    assert (
        vocab.to_tokens(tokens[0])
        == "<cls> the cat sleeps . <sep> <pad>".split()
    )
    assert not segments.any()
    with pytest.raises(ValueError, match="num_steps"):
        bert_inputs.encode_sentences(vocab, ENGLISH[2:3], 5)


def test_encode_sentences_refuses_a_str_and_gives_long_lengths_when_empty():
    vocab = bert_inputs.bert_vocab(ENGLISH)
    with pytest.raises(TypeError, match="sentences"):
        # a string, not 15 sentences
        bert_inputs.encode_sentences(vocab, "the cat sleeps .", 7)
    tokens, segments, valid_lens = bert_inputs.encode_sentences(vocab, [], 7)
    assert tokens.shape == segments.shape == (0, 7)
    assert valid_lens.shape == (0,) and valid_lens.dtype == torch.long
    _, _, valid_lens, labels = bert_inputs.label_dataset(vocab, [], 7, "tense")
    assert valid_lens.dtype == labels.dtype == torch.long
    with pytest.raises(TypeError, match="rows"):
        bert_inputs.label_dataset(vocab, "the cat sleeps .", 7, "tense")


def test_second_segment_follows_the_first_with_segment_one():
    vocab = bert_inputs.bert_vocab(ENGLISH + FRENCH)
    first, _, first_lens = bert_inputs.encode_sentences(vocab, ENGLISH[:2], 8)
    seconds = [vocab[FRENCH[0].split()], vocab[FRENCH[1].split()]]
    tokens, segments, valid_lens = bert_inputs.add_second_segment(
        first, first_lens, seconds, vocab["<sep>"], vocab.pad, 14
    )
    assert vocab.to_tokens(tokens[0][: valid_lens[0]]) == (
        "<cls> the cat sleeps . <sep> le chat dort . <sep>".split()
    )
    assert segments[0].tolist() == [0] * 6 + [1] * 5 + [0] * 3
    assert valid_lens.tolist() == [11, 13]
    assert (tokens[0, 11:] == vocab.pad).all()
    with pytest.raises(ValueError, match="num_steps"):
        bert_inputs.add_second_segment(
            first, first_lens, seconds, vocab["<sep>"], vocab.pad, 11
        )


def test_translation_pairs_pair_half_with_their_translation_and_the_rest_elsewhere():
    partner, is_translation = bert_inputs.translation_pairs(
        5000, torch.Generator().manual_seed(0)
    )
    own = torch.arange(5000)
    assert torch.equal(partner == own, is_translation.bool())
    assert (
        abs(float(is_translation.float().mean()) - 0.5) < 5 * 0.5 / 5000**0.5
    )
    assert int(partner.min()) >= 0 and int(partner.max()) < 5000
    with pytest.raises(ValueError, match="num_pairs"):
        bert_inputs.translation_pairs(1, torch.Generator())


# a BERT of width 8, one block, pretrained for 6 steps, fine-tuned for 40 epochs
TINY = dataclasses.replace(
    SETTINGS, num_hiddens=8, ffn_num_hiddens=16, num_heads=2, num_blks=1,
    max_len=24, batch_size=2, pretrain_steps=6, finetune_epochs=40,
    finetune_batch_size=4,
)  # fmt: skip


@pytest.mark.parametrize("use_pair", [False, True])
def test_pretraining_is_repeatable_and_trains_every_head_it_uses(use_pair):
    vocab = bert_inputs.bert_vocab(ENGLISH + FRENCH)

    def run():
        torch.manual_seed(0)
        model = BERTModel(len(vocab), 8, 16, 2, 1, 0.1, max_len=24)
        before = {
            name: p.detach().clone() for name, p in model.named_parameters()
        }
        history = pretrain_bert(
            model, ENGLISH, FRENCH, vocab, use_pair, TINY, seed=3
        )
        changed = {
            name
            for name, p in model.named_parameters()
            if not torch.equal(p, before[name])
        }
        return history, changed

    (first, changed), (again, _) = run(), run()
    torch.manual_seed(0)
    shorter = pretrain_bert(
        BERTModel(len(vocab), 8, 16, 2, 1, 0.1, max_len=24),
        ENGLISH,
        FRENCH,
        vocab,
        use_pair,
        TINY,
        seed=3,
        steps=2,
    )
    # `steps` overrides the settings' count; the steps taken are the same.
    assert shorter["mlm_loss"] == first["mlm_loss"][:2]
    assert (
        first["mlm_loss"] == again["mlm_loss"] and len(first["mlm_loss"]) == 6
    )
    assert len(first["pair_loss"]) == (6 if use_pair else 0)
    assert any(name.startswith("pair.") for name in changed) == use_pair
    assert any(name.startswith("mlm.") for name in changed)
    with pytest.raises(ValueError, match="aligned"):
        pretrain_bert(
            BERTModel(len(vocab), 8, 16, 2, 1, 0.1, max_len=24),
            ENGLISH,
            FRENCH[:2],
            vocab,
            use_pair,
            TINY,
        )


def test_fine_tuning_fits_a_small_labelled_set():
    vocab = bert_inputs.bert_vocab(ENGLISH)
    tokens, segments, valid_lens = bert_inputs.encode_sentences(
        vocab, ENGLISH, 10
    )
    labels = torch.tensor([0, 0, 1, 1])
    torch.manual_seed(0)
    classifier = BERTClassifier(
        BERTEncoder(len(vocab), 8, 16, 2, 1, 0.0, max_len=10),
        2,
        pooling="mean",
    )
    losses = fine_tune(
        classifier, tokens, segments, valid_lens, labels, TINY, seed=0
    )
    assert len(losses) == TINY.finetune_epochs
    assert torch.equal(
        predict(classifier, tokens, segments, valid_lens, batch_size=3), labels
    )
    with pytest.raises(ValueError, match="labels"):
        fine_tune(classifier, tokens, segments, valid_lens, labels[:3], TINY)


def test_sentence_labels_follow_the_corpus_and_the_surface():
    splits = corpus.english_french_corpus(5, num_pairs=300)
    labelled = corpus.english_sentence_labels(5, num_pairs=300)
    assert [[e for e, _ in split] for split in splits] == [
        [row[0] for row in split] for split in labelled
    ]
    rows = [row for split in labelled for row in split]
    assert {row[1] for row in rows} == set(bert_inputs.TASKS["tense"][1])
    assert {row[3] for row in rows} == set(bert_inputs.TASKS["frame"][1])
    # Each frame but the transitive one has verbs of its own (every form).
    frame_verbs = {
        "copula": {"be", "is", "are", "am", "was", "were"},
        "ditransitive": {"give", "gives", "gave"},
        "motion": {"go", "goes", "went", "come", "comes", "came"},
        "activity": {"sleep", "sleeps", "slept", "play", "plays", "played"},
    }
    for english, tense, mood, frame in rows:
        words = english.split()
        assert (tense == "future") == ("will" in words), english
        assert (mood == "question") == (words[-1] == "?"), english
        assert (mood == "negation") == ("not" in words), english
        for name, verbs in frame_verbs.items():
            assert (frame == name) == bool(verbs & set(words)), english


def test_label_dataset_encodes_each_task_and_refuses_others():
    rows = corpus.english_sentence_labels(5, num_pairs=300)[0][:40]
    vocab = bert_inputs.bert_vocab([row[0] for row in rows])
    for task, (column, classes) in bert_inputs.TASKS.items():
        tokens, segments, valid_lens, labels = bert_inputs.label_dataset(
            vocab, rows, 20, task
        )
        assert tokens.shape == segments.shape == (40, 20)
        assert [classes[i] for i in labels.tolist()] == [
            row[column] for row in rows
        ]
        sentences = [row[0] for row in rows]
        _, _, expected_lens = bert_inputs.encode_sentences(
            vocab, sentences, 20
        )
        assert torch.equal(valid_lens, expected_lens)
    with pytest.raises(ValueError, match="task"):
        bert_inputs.label_dataset(vocab, rows, 20, "mood")


def test_the_chapter_experiment_forks_one_pretraining_and_scores_every_task():
    settings = dataclasses.replace(
        TINY,
        max_len=SETTINGS.max_len,
        pretrain_steps=3,
        continue_steps=2,
        num_labelled=8,
        finetune_epochs=1,
    )
    result = compare_pretraining(seed=1, settings=settings)
    histories, vocab = result["histories"], result["vocab"]
    assert [len(histories[k]["mlm_loss"]) for k in histories] == [3, 2, 2]
    assert histories["MLM"]["pair_loss"] == []
    assert len(histories["MLM + pair"]["pair_loss"]) == 2
    # The shared part is an ordinary pretraining of the seed's fresh model.
    train, _, _ = corpus.english_french_corpus(0)
    again = pretrain_bert(
        new_bert(len(vocab), settings, seed=1),
        [pair[0] for pair in train],
        [pair[1] for pair in train],
        vocab,
        False,
        settings,
        seed=1,
    )
    assert again["mlm_loss"] == histories["shared"]["mlm_loss"]
    # Only the pair variant trains the pair head after the fork.
    mlm, pair = result["models"]["MLM"], result["models"]["MLM + pair"]
    assert not torch.equal(mlm.pair.output.weight, pair.pair.output.weight)
    tokens, segments, valid_lens = bert_inputs.encode_sentences(
        vocab, ["you sleep ."], 6
    )
    for task, (_, classes) in bert_inputs.TASKS.items():
        accuracy = result["accuracy"][task]
        assert set(accuracy) == {"scratch", "MLM", "MLM + pair"}
        assert all(0.0 <= value <= 1.0 for value in accuracy.values())
        for classifier in result["classifiers"][task].values():
            scores = classifier(tokens, segments, valid_lens)
            assert scores.shape == (1, len(classes))
