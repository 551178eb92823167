//! Messages exchanged between actors: plain data, `Clone`, no behaviour.
