//! Every command the text service knows, with its sub-commands and
//! flags, as short client sessions: seeds for the targets that reach the
//! service behind something else first (sasl behind a `-Y` login, udp in
//! a frame, conn in a script), written by `examples/fuzz_cross_seeds.rs`.
//! Without them those targets find a command a dictionary word at a time
//! (a single sasl input once brought 313 edges: `stats settings` behind
//! the login). The test below runs each session through the conn harness
//! and checks that no line of it is answered `ERROR` (an unknown command),
//! so a renamed command or a typo here fails it.

/// One session per command or family, each standing alone (a fresh
/// server), a key set first where the command needs one (not before a
/// dump, which refuses to follow other commands in one read).
pub const SESSIONS: &[&str] = &[
    // Storage, retrieval, arithmetic, touch, delete.
    "set k 0 0 1\r\na\r\nget k\r\ngets k\r\nget k nope k\r\n",
    "add k 0 0 1\r\na\r\nadd k 5 100 2\r\nbb\r\nreplace k 1 0 2\r\ncc\r\nreplace nope 0 0 1\r\nz\r\nget k\r\n",
    "set k 0 0 1\r\na\r\nappend k 0 0 2\r\nbc\r\nprepend k 0 0 2\r\nxy\r\nappend nope 0 0 1\r\nz\r\ngets k\r\n",
    "set k 0 0 1\r\na\r\ngets k\r\ncas k 0 0 1 1\r\nb\r\ncas k 0 0 1 1\r\nc\r\ncas nope 0 0 1 1\r\nd\r\ngets k\r\n",
    "set c 0 0 2\r\n10\r\nincr c 5\r\ndecr c 100\r\nincr c 18446744073709551615\r\nincr nope 1\r\nincr c x\r\nset s 0 0 1\r\na\r\nincr s 1\r\n",
    "set t 0 0 1\r\na\r\ntouch t 10\r\ntouch nope 10\r\ngat 100 t\r\ngats 0 t nope\r\ngat -1 t\r\nget t\r\n",
    "set d 0 0 1\r\na\r\ndelete d\r\ndelete d\r\ndelete d 0\r\nset d 0 0 1\r\na\r\ndelete d noreply\r\nget d\r\n",
    "set a 0 0 1 noreply\r\na\r\nadd a 0 0 1 noreply\r\nb\r\nreplace a 0 0 1 noreply\r\nc\r\nappend a 0 0 1 noreply\r\nd\r\nprepend a 0 0 1 noreply\r\ne\r\nincr a 1 noreply\r\ntouch a 1 noreply\r\ncas a 0 0 1 9 noreply\r\nf\r\nget a\r\n",
    "set e 0 -1 1\r\na\r\nget e\r\nset e 0 2592001 1\r\na\r\nget e\r\nset e 7 1 1\r\na\r\nget e\r\n",
    "set k 0 0 2\r\nabc\r\nset k 0 0 -1\r\nset k abc 0 1\r\na\r\nget k\r\nset big 0 0 2000000\r\nget big\r\n",
    // Meta commands and their flags.
    "ms m 2 T0 F5 C0 I\r\nhi\r\nms m 2 MA\r\nxy\r\nms m 2 MP\r\nxy\r\nms m 2 MR\r\nxy\r\nms n 2 ME\r\nxy\r\nms m 2 MS q\r\nzz\r\nms a2V5 2 b\r\nhi\r\nmn\r\n",
    "ms m 2 c k O7 N0\r\nhi\r\nms m 2 C1\r\nhi\r\nms m 2 T60 F3 I\r\nhi\r\nmg m v\r\n",
    "ms m 2\r\nhi\r\nmg m v k c f t s h l O123\r\nmg m\r\nmg nope v q\r\nmg nope v\r\nmg m v N30 R10 T60\r\nmg a2V5 b v k\r\nmg m E99 v\r\nmg m v q k\r\nmn\r\n",
    "mg nope N30 v c t\r\nmg nope v\r\nms nope 1 C0\r\nx\r\nmg nope v c W Z\r\n",
    "ms m 2\r\nhi\r\nmd m q\r\nmd m\r\nms m 2\r\nhi\r\nmd m I T30\r\nmg m v c\r\nmd m C1 x\r\nmd nope\r\nmd a2V5 b\r\nmn\r\n",
    "ms c 1\r\n5\r\nma c\r\nma c v\r\nma n N0 J5 v\r\nma c MI D10 v t c\r\nma c MD D100 v\r\nma c q\r\nma c C1\r\nma c E55 v\r\nma nope\r\nmn\r\n",
    "ms m 2 T100\r\nhi\r\nme m\r\nme nope\r\nme a2V5 b\r\n",
    "ms m 2\r\nhi\r\nmj 0\r\nmj 1700000000\r\nmj\r\nmj x\r\n",
    // Administration.
    "version\r\nverbosity 1\r\nverbosity 0 noreply\r\nverbosity\r\n",
    "set k 0 0 1\r\na\r\nflush_all\r\nget k\r\nflush_all 0\r\nflush_all 10\r\nflush_all -1\r\nflush_all 10 noreply\r\nflush_all x\r\n",
    "cache_memlimit 100\r\ncache_memlimit 8\r\ncache_memlimit 100 noreply\r\n",
    "set k 0 0 1\r\na\r\ndebugtime p\r\ndebugtime 100\r\nget k\r\ndebugtime r\r\ndebugtime -5\r\n",
    "set k 0 0 1\r\na\r\nstats\r\n",
    "stats settings\r\n",
    "set k 0 0 1\r\na\r\nstats items\r\n",
    "set k 0 0 1\r\na\r\nstats slabs\r\n",
    "set k 0 0 1\r\na\r\nstats sizes\r\n",
    "stats conns\r\n",
    "get k\r\nstats latency\r\n",
    "get k\r\nget k\r\nstats hotkeys\r\n",
    "set k 0 0 1\r\na\r\nstats journal\r\n",
    "get k\r\nstats mrc\r\n",
    "stats memory\r\n",
    "stats extstore\r\n",
    "stats detail on\r\nset d:x 0 0 1\r\na\r\nget d:x\r\ndelete d:y\r\nstats detail dump\r\nstats detail off\r\nstats detail\r\n",
    "set k 0 0 1\r\na\r\nstats cachedump 1 10\r\nstats cachedump 1 0\r\n",
    "set k 0 0 1\r\na\r\nget k\r\nstats reset\r\nstats\r\n",
    "set k 0 0 1\r\na\r\nlru_crawler crawl all\r\n",
    "set k 0 0 1\r\na\r\nlru_crawler crawl 1,2\r\n",
    "lru_crawler metadump all\r\n",
    "lru_crawler metadump hash\r\n",
    "lru_crawler metadump 1\r\n",
    "lru_crawler mgdump all\r\n",
    "lru_crawler tocrawl 10\r\nlru_crawler sleep 10\r\nlru_crawler sleep 2000000\r\nlru_crawler disable\r\nlru_crawler enable\r\n",
    "lru tune 10 25 0.1 2\r\nlru tune 50 50 1 1\r\nlru mode flat\r\nlru mode segmented\r\nlru temp_ttl 60\r\n",
    "slabs reassign 1 2\r\nslabs reassign -1 2\r\nslabs automove 0\r\nslabs automove 1\r\nslabs automove 2\r\nslabs automove ratio 0.5\r\nslabs automove freeratio 0.1\r\nslabs automove window 30\r\nslabs automove window 2\r\n",
    "extstore item_size 100\r\nextstore item_age 10\r\nextstore low_ttl 60\r\nextstore recache_rate 2000\r\nextstore compact_under 10\r\nextstore drop_under 2\r\nextstore max_sleep 100\r\nextstore max_frag 0.5\r\nextstore drop_unread 1\r\nextstore free_memchunks 0 1\r\nextstore item_size 100 noreply\r\n",
    "watch\r\n",
    "watch fetchers mutations evictions\r\n",
    "watch connevents deletions sysevents rawcmds\r\n",
    "watch proxyreqs proxyevents proxyuser\r\n",
    "refresh_certs\r\n",
    "shutdown\r\n",
    "shutdown graceful\r\n",
    "set k 0 0 1\r\na\r\nquit\r\nget k\r\n",
];

#[cfg(test)]
mod tests {
    use super::super::conn;
    use super::super::script::Script;
    use super::SESSIONS;

    /// Each session through the conn harness (its oracle included): no
    /// line of it is `ERROR`, the reply to a command the server does not
    /// know.
    #[test]
    fn every_session_is_known_to_the_service() {
        for session in SESSIONS {
            for flash in [false, true] {
                eprintln!("{session:?}, flash: {flash}");
                let outcome = conn::run(&Script::stream(session.as_bytes(), flash));
                let replies = String::from_utf8_lossy(&outcome.replies[0]).into_owned();
                assert!(!replies.is_empty(), "{session:?}: no reply");
                assert!(!replies.split("\r\n").any(|line| line == "ERROR"), "{session:?} (flash: {flash}): {replies:?}");
            }
        }
    }
}
