pub mod ort;
