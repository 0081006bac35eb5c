//! Compile-fail tests (issue 9): the type system, not the pool at run
//! time, refuses closures that are not `Send` and borrows that could
//! outlive what they borrow. Each `compile_fail` block names the error it
//! must fail with (rustdoc checks that code on nightly only), and is
//! followed by a twin that differs only in the offending part and
//! compiles: on stable the twin is what keeps a block from passing by
//! failing for another reason. (Compiled here with rustc 1.95, each block
//! fails with exactly the code it names.)
//!
//! # `Pool::spawn`
//!
//! A closure capturing an `Rc` is not `Send`:
//!
//! ```compile_fail,E0277
//! let pool = wspool::Pool::builder().min_threads(1).build().unwrap();
//! let shared = std::rc::Rc::new(5);
//! pool.spawn(move || drop(shared)).unwrap();
//! ```
//!
//! ```
//! let pool = wspool::Pool::builder().min_threads(1).build().unwrap();
//! let shared = std::sync::Arc::new(5);
//! pool.spawn(move || drop(shared)).unwrap();
//! ```
//!
//! A spawned task may outlive the caller's frame, so it cannot borrow it:
//!
//! ```compile_fail,E0597
//! let pool = wspool::Pool::builder().min_threads(1).build().unwrap();
//! let local = vec![1, 2, 3];
//! let borrowed = &local;
//! pool.spawn(move || assert_eq!(borrowed.len(), 3)).unwrap();
//! ```
//!
//! ```
//! let pool = wspool::Pool::builder().min_threads(1).build().unwrap();
//! static LOCAL: [i32; 3] = [1, 2, 3];
//! let borrowed = &LOCAL;
//! pool.spawn(move || assert_eq!(borrowed.len(), 3)).unwrap();
//! ```
//!
//! # `Pool::spawn_batch` and `Pool::submit_batch`
//!
//! Every task of a batch must be `Send` and `'static`, as for `spawn`:
//!
//! ```compile_fail,E0277
//! let pool = wspool::Pool::builder().min_threads(1).build().unwrap();
//! let shared = std::rc::Rc::new(5);
//! pool.spawn_batch([move || drop(shared)]).unwrap();
//! ```
//!
//! ```
//! let pool = wspool::Pool::builder().min_threads(1).build().unwrap();
//! let shared = std::sync::Arc::new(5);
//! pool.spawn_batch([move || drop(shared)]).unwrap();
//! ```
//!
//! ```compile_fail,E0597
//! let pool = wspool::Pool::builder().min_threads(1).build().unwrap();
//! let local = vec![1, 2, 3];
//! let borrowed = &local;
//! pool.submit_batch([move || borrowed.len()]).unwrap();
//! ```
//!
//! ```
//! let pool = wspool::Pool::builder().min_threads(1).build().unwrap();
//! static LOCAL: [i32; 3] = [1, 2, 3];
//! let borrowed = &LOCAL;
//! pool.submit_batch([move || borrowed.len()]).unwrap();
//! ```
//!
//! # `Pool::submit`
//!
//! Neither the closure nor its result may be non-`Send`:
//!
//! ```compile_fail,E0277
//! let pool = wspool::Pool::builder().min_threads(1).build().unwrap();
//! let shared = std::rc::Rc::new(5);
//! let h = pool.submit(move || *shared + 1).unwrap();
//! ```
//!
//! ```compile_fail,E0277
//! let pool = wspool::Pool::builder().min_threads(1).build().unwrap();
//! let h = pool.submit(|| std::rc::Rc::new(5)).unwrap();
//! ```
//!
//! ```
//! let pool = wspool::Pool::builder().min_threads(1).build().unwrap();
//! let shared = std::sync::Arc::new(5);
//! assert_eq!(pool.submit(move || *shared + 1).unwrap().wait().unwrap(), 6);
//! assert_eq!(*pool.submit(|| std::sync::Arc::new(5)).unwrap().wait().unwrap(), 5);
//! ```
//!
//! A submitted task cannot borrow the caller's frame either:
//!
//! ```compile_fail,E0597
//! let pool = wspool::Pool::builder().min_threads(1).build().unwrap();
//! let local = vec![1, 2, 3];
//! let borrowed = &local;
//! let h = pool.submit(move || borrowed.len()).unwrap();
//! ```
//!
//! ```
//! let pool = wspool::Pool::builder().min_threads(1).build().unwrap();
//! let local = vec![1, 2, 3];
//! let owned = local.clone();
//! assert_eq!(pool.submit(move || owned.len()).unwrap().wait().unwrap(), local.len());
//! ```
//!
//! # `Pool::scope`
//!
//! Scope tasks may borrow what outlives the scope, but must be `Send`:
//!
//! ```compile_fail,E0277
//! let pool = wspool::Pool::builder().min_threads(1).build().unwrap();
//! let shared = std::rc::Rc::new(5);
//! pool.scope(|s| s.spawn(move || drop(shared)));
//! ```
//!
//! ```
//! let pool = wspool::Pool::builder().min_threads(1).build().unwrap();
//! let shared = std::sync::Arc::new(5);
//! pool.scope(|s| s.spawn(move || drop(shared)));
//! ```
//!
//! A scope task cannot borrow data that dies inside the scope body (it
//! could still be running when that data is dropped):
//!
//! ```compile_fail,E0597
//! let pool = wspool::Pool::builder().min_threads(1).build().unwrap();
//! pool.scope(|s| {
//!     let inner = vec![1, 2, 3];
//!     let borrowed = &inner;
//!     s.spawn(move || assert_eq!(borrowed.len(), 3));
//! });
//! ```
//!
//! ```
//! let pool = wspool::Pool::builder().min_threads(1).build().unwrap();
//! let outer = vec![1, 2, 3];
//! pool.scope(|s| {
//!     let borrowed = &outer;
//!     s.spawn(move || assert_eq!(borrowed.len(), 3));
//! });
//! ```
//!
//! Nor can the scope itself escape its closure:
//!
//! ```compile_fail,E0521
//! let pool = wspool::Pool::builder().min_threads(1).build().unwrap();
//! let mut leaked = None;
//! pool.scope(|s| leaked = Some(s));
//! ```
//!
//! ```
//! let pool = wspool::Pool::builder().min_threads(1).build().unwrap();
//! let mut seen = None;
//! pool.scope(|s| seen = Some(std::ptr::from_ref(s) as usize));
//! assert!(seen.is_some());
//! ```
//!
//! # `Pool::join` and `wspool::join`
//!
//! Both halves may borrow (join returns only after both finished), but
//! each half and its result must be `Send`:
//!
//! ```compile_fail,E0277
//! let pool = wspool::Pool::builder().min_threads(1).build().unwrap();
//! let shared = std::rc::Rc::new(5);
//! pool.join(move || drop(shared), || ());
//! ```
//!
//! ```compile_fail,E0277
//! let pool = wspool::Pool::builder().min_threads(1).build().unwrap();
//! pool.join(|| (), || std::rc::Rc::new(5));
//! ```
//!
//! ```compile_fail,E0277
//! let shared = std::rc::Rc::new(5);
//! wspool::join(|| (), move || drop(shared));
//! ```
//!
//! ```
//! let pool = wspool::Pool::builder().min_threads(1).build().unwrap();
//! let local = vec![1, 2, 3];
//! let shared = std::sync::Arc::new(5);
//! let (a, b) = pool.join(move || *shared, || std::sync::Arc::new(local.len()));
//! assert_eq!((a, *b), (5, 3));
//! let shared = std::sync::Arc::new(5);
//! wspool::join(|| (), move || drop(shared));
//! ```
//!
//! # Groups and serial queues
//!
//! They take `'static + Send` tasks, like `spawn`:
//!
//! ```compile_fail,E0277
//! let pool = wspool::Pool::builder().min_threads(1).build().unwrap();
//! let shared = std::rc::Rc::new(5);
//! pool.group().spawn(move || drop(shared)).unwrap();
//! ```
//!
//! ```compile_fail,E0597
//! let pool = wspool::Pool::builder().min_threads(1).build().unwrap();
//! let local = vec![1, 2, 3];
//! let borrowed = &local;
//! pool.serial().spawn(move || assert_eq!(borrowed.len(), 3)).unwrap();
//! ```
//!
//! ```
//! let pool = wspool::Pool::builder().min_threads(1).build().unwrap();
//! let shared = std::sync::Arc::new(5);
//! let g = pool.group();
//! g.spawn(move || drop(shared)).unwrap();
//! g.wait().unwrap();
//! let local = vec![1, 2, 3];
//! pool.serial().submit(move || assert_eq!(local.len(), 3)).unwrap().wait().unwrap();
//! ```
//!
//! A [`crate::LocalGroup`] lives in `group_scope`'s frame: it cannot be
//! taken out of the closure (a borrow-check error without a code), and its
//! tasks are `'static` like any group's:
//!
//! ```compile_fail
//! let pool = wspool::Pool::builder().min_threads(1).build().unwrap();
//! let escaped = pool.group_scope(|g| g);
//! drop(escaped);
//! ```
//!
//! ```compile_fail,E0597
//! let pool = wspool::Pool::builder().min_threads(1).build().unwrap();
//! let local = vec![1, 2, 3];
//! let borrowed = &local;
//! pool.group_scope(|g| g.spawn(move || assert_eq!(borrowed.len(), 3)).unwrap());
//! ```
//!
//! ```
//! let pool = wspool::Pool::builder().min_threads(1).build().unwrap();
//! let pending = pool.group_scope(|g| g.pending());
//! assert_eq!(pending, 0);
//! let local = std::sync::Arc::new(vec![1, 2, 3]);
//! pool.group_scope(|g| g.spawn(move || assert_eq!(local.len(), 3)).unwrap());
//! ```
