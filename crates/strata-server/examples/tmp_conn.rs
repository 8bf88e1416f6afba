fn main() {
    let data = std::fs::read(std::env::args().nth(1).unwrap()).unwrap();
    let script = strata_server::fuzzing::script::Script::decode(&data);
    for s in &script.steps { println!("{s:?}"); }
    let out = strata_server::fuzzing::conn::run(&script);
    println!("{out:?}");
}
